"""OpenAI Chat Completions (and SageMaker's /invocations): ingest, the chunk encoder and its fold, routes."""
