"""Prompt rendering: Conversation + GenerationParams → :class:`app.model.Prompt`."""
