"""OpenChatML 2.2: text rendering with client text made inert, the text-level parser and its

header grammar.
"""
