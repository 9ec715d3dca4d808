"""OpenAI's Conversations API (``/v1/conversations``), scoped to the caller's API key."""
