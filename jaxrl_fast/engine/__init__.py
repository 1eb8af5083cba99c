"""The engine: acting, replay, placement, the schedules, the processes of a run."""
