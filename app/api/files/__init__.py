"""OpenAI's Files API (``/v1/files``): uploads streamed into a :class:`~app.knowledge.files.FileStore`."""
