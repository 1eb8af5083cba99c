"""Per-environment presets (TOML), installed as the package data `jaxrl_fast.envs`."""
