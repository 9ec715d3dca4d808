"""A model's own Jinja chat template: sandboxed rendering into trusted / untrusted segments,

the parser built from the template's analysis (analysis/).
"""
