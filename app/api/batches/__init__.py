"""``/v1/batches``: OpenAI's Batch API (the worker is :mod:`app.batches`)."""
