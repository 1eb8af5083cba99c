"""Schedules: when acting and learning happen relative to each other. None imports an algorithm."""
