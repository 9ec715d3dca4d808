"""What every output parser shares: the parser protocols, the text-decoder wrapper, token

accounting, the parts and tool-call builder.
"""
