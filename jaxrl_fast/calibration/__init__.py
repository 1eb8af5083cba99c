"""Calibration (Spreeze's automatic sizing): measure this machine, then pick the sizes."""
