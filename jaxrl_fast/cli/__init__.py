"""The command-line entry points: argv in, a run out, the exit status as documented."""
