"""Configuration, without JAX: the run's frozen dataclasses (run.py), the presets of envs/, the checks
a config passes before anything is built, keyword overrides (the Python API's), and the plan of a
run's sizes."""
