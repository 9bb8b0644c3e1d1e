"""Arm a run: decoys, the Actions-shaped job, venv templates, the run's layout."""
