"""The environment side: ids and options, the EnvPool backend, its wire format, episode bookkeeping."""
