"""Pure maths for RL: returns, distributions, running statistics. Written for one stream, vmapped."""
