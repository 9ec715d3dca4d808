"""Encoders: semantic events → wire protocols (Chat Completions, ...) and SSE framing."""
