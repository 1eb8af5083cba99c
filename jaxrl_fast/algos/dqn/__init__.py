"""DQN (Mnih et al. 2015) with double-DQN targets: `config` (its flags), `losses` (target and Huber
regression, pure), `learner` (the bundle a schedule drives)."""
