"""The passthrough APIs: legacy ``/v1/completions``, ``/v1/embeddings``, ``/tokenize`` and
``/detokenize`` (the client's own prompt or input, forwarded to the model's backend)."""
