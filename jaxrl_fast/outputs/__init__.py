"""What a run leaves behind: the run directory's layout, checkpoints and load_policy, metrics,
learning curves, videos, profiler traces, aggregates over seeds."""
