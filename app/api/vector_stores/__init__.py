"""OpenAI's Vector Stores API (``/v1/vector_stores``: stores, their files, file batches and
search) over the knowledge facade (:class:`app.knowledge.service.Knowledge`)."""
