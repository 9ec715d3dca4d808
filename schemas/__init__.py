"""Pydantic wire models of the public APIs (no logic lives here)."""
