"""One run: built from its resolved config, driven call by call, reported into its run directory."""
