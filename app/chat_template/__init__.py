"""Chat-template auto-parser: differential analysis of a Jinja template's output format.

:func:`app.chat_template.analysis.analyze` renders variants of an assistant message
through the template and derives the markers of reasoning, content and tool calls;
:class:`app.parse.template.TemplateDecoder` parses model output with them.
"""
