"""Prompt formats: each renders a conversation into a prompt and parses the model's output back

into events (harmony, openchatml, template, chat); parsing/ holds what every parser shares.
"""
