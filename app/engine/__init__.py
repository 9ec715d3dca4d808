"""The run engine: every request of every API runs here.

``engine.py`` plans a run (route, defaults, capability checks, context budget and
truncation) and starts it; ``run.py`` is the run itself: the one loop that turns the
generation's events into the API's encoded events, with cancellation, shutdown,
error → terminal event and persistence hooks.  The APIs (``app/http/routes_*``) only
ingest, pick an encoder, and frame what the run yields.
"""
