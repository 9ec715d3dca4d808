"""Chat-mode backends: the conversation goes upstream as messages; the server's structured

deltas become events.
"""
