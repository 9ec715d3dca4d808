"""Hosted tools: what the agentic loop runs on the model's behalf (:mod:`app.tools.base`)."""
