"""Incremental parsers: backend chunks → semantic :mod:`app.events`."""
