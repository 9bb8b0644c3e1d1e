"""Watching the relay run: Prometheus metrics (``metrics``) and JSON logs (``logs``).

Neither imports the rest of the relay, so every part of it may record here.
"""
