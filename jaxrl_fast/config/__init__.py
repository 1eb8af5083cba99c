"""Configuration, without JAX: the run's frozen dataclasses, the presets of envs/, the plan of a run's sizes."""
