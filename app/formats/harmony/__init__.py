"""Harmony (gpt-oss): token-id rendering with openai-harmony, the token-level parser, the o200k

vocabulary.
"""
