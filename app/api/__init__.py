"""The public APIs, each ingest + encoder + thin routes on the run engine: chat/ (Chat

Completions, SageMaker) and responses/ (Open Responses).
"""
