"""The Anthropic Messages API (``/v1/messages``): ingest + encoder + routes."""
