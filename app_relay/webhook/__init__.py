"""Take webhooks in: the app (``app.py``), the route that verifies and records
(``receive.py``, ``signature.py``, ``intake.py``), health, the routers of events, the workers."""
