"""Chat-template auto-parser: differential analysis of a Jinja template's output format.

:func:`app.formats.template.analysis.analysis.analyze` renders variants of an assistant message
through the template and derives the markers of reasoning, content and tool calls;
:class:`app.formats.template.parse.TemplateDecoder` parses model output with them.
"""
