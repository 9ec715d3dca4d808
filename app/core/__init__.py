"""The shared vocabulary of every layer: the internal model (conversation, prompt, backend

output), semantic events, typed errors, ids, principals.
"""
