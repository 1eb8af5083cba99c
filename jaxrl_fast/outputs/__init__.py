"""What a run leaves behind: checkpoints, metrics, learning curves, videos, profiler traces, aggregates."""
