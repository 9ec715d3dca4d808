"""Command-line entry points: serve (with --embedded llama.cpp), template analysis, OpenChatML

transcripts.
"""
