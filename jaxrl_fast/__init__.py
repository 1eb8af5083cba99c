"""jaxrl_fast: EnvPool's C++ batched environments streaming into jitted JAX learner steps."""

__version__ = "0.1.0"
