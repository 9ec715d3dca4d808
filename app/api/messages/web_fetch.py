"""Anthropic's ``web_fetch_20250910`` server tool (name ``web_fetch``) on the gateway's URL
fetcher (:func:`app.api.messages.fetch.fetch`): the model calls ``web_fetch`` with ``{"url"}``
and reads the page's text; the client gets ``server_tool_use`` and ``web_fetch_tool_result``
(:mod:`app.api.messages.server_blocks`).

What may be fetched, all of it required:

* the operator's SSRF rules: a prefix of ``[media] allowed_urls`` covers the URL, its host
  resolves to public addresses unless ``allow_private_names``, no redirect is followed, at most
  :data:`MAX_BYTES` are read within ``fetch_timeout`` (``[media]`` as for URL sources; with no
  ``allowed_urls`` the tool is a 400 up front, as a server tool without a provider is);
* the tool's ``allowed_domains`` / ``blocked_domains`` (Anthropic's filters);
* the URL appears in the conversation (the request's messages) or in a page this request
  fetched: as on Anthropic's API the model may not make up URLs (``url_not_in_prior_context``),
  which keeps a prompt-injected model from sending data out in a URL it builds.

A refused or failed fetch is not an HTTP error: the model reads it and goes on, and the result
block carries Anthropic's ``error_code`` (``invalid_tool_input``, ``url_too_long``,
``url_not_allowed``, ``url_not_in_prior_context``, ``url_not_accessible``,
``unsupported_content_type``, ``max_uses_exceeded``).  Text, JSON, XML and HTML (reduced to
its readable text off the event loop) are read; anything else is ``unsupported_content_type``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.api.messages.fetch import fetch
from app.config import MediaSettings
from app.core.conversation import FunctionTool
from app.core.errors import InvalidRequest
from app.knowledge.extract import Unreadable, decode, html_text
from app.tools import egress
from app.tools.base import ToolOutcome
from app.tools.search import in_domains

NAME = "web_fetch"
TYPES = ("web_fetch_20250910",)
MAX_URL = 250  # Anthropic's url_too_long
MAX_BYTES = 2 * 1024 * 1024
TEXTUAL = ("text/", "application/json", "application/xml", "application/xhtml+xml")
FUNCTION = FunctionTool(
    NAME, "Fetch the text of the web page or document at a URL. Only URLs that the user gave or "
          "that an earlier result showed can be fetched.",
    {"type": "object", "properties": {"url": {"type": "string", "description": "The URL to fetch."}},
     "required": ["url"]})


def check_media(media: MediaSettings, where: str, type_: str) -> None:
    """A 400 when the operator lets the gateway fetch no URL at all."""
    if not media.allowed_urls:
        raise InvalidRequest(f"{where}: the server tool {type_!r} (web_fetch) is not available: this "
                             "gateway's operator allows no URL to be fetched ([media] allowed_urls). "
                             "Leave the tool out.", param=f"{where}.type")


def _failed(code: str, why: str, url: str = "") -> ToolOutcome:
    return ToolOutcome("", f"Not fetched: {why}", {"error_code": code, "url": url})


def _text(media_type: str, data: bytes) -> tuple[str, str]:
    """(title, text) of a fetched body (CPU work: run in a thread)."""
    text = decode(data)
    if media_type in ("text/html", "application/xhtml+xml"):
        head = text.lower().find("<title>")
        end = text.lower().find("</title>", head)
        title = " ".join(html_text(text[head + 7:end]).split()) if 0 <= head < end else ""
        return title, html_text(text)
    return "", text


@dataclass
class WebFetchToolbox:
    """The ``web_fetch`` function of one request (see the module docstring); ``context``: the
    text URLs must appear in (the request's messages, then every fetched page)."""

    media: MediaSettings
    context: str
    allowed: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()
    functions: tuple[FunctionTool, ...] = field(default=(FUNCTION,), init=False)

    def owns(self, name: str) -> bool:
        return name == NAME

    def needs_approval(self, name: str) -> bool:
        return False

    async def call(self, name: str, arguments: str) -> ToolOutcome:
        try:
            args: Any = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            args = None
        url = args.get("url") if isinstance(args, dict) else None
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return _failed("invalid_tool_input", "the call needs an http(s) url.")
        if len(url) > MAX_URL:
            return _failed("url_too_long", f"the URL is longer than {MAX_URL} characters.", url[:MAX_URL])
        if ((self.allowed and not in_domains(url, self.allowed))
                or (self.blocked and in_domains(url, self.blocked))):
            return _failed("url_not_allowed", "the URL's domain is not allowed for this request.", url)
        if url not in self.context:
            return _failed("url_not_in_prior_context", "only a URL that the conversation or an earlier "
                           "fetch shows can be fetched.", url)
        if not egress.allowed(url, self.media.allowed_urls):
            return _failed("url_not_allowed", "the gateway's operator does not allow this URL.", url)
        try:
            declared, data = await fetch(url, self.media, MAX_BYTES, "url")
        except InvalidRequest as exc:
            return _failed("url_not_accessible", exc.message, url)
        media_type = declared or "text/plain"
        if not media_type.startswith(TEXTUAL):
            return _failed("unsupported_content_type", f"the URL serves {media_type}.", url)
        try:
            title, text = await asyncio.to_thread(_text, media_type, data)
        except Unreadable:
            return _failed("unsupported_content_type", "the URL's content is not UTF-8 text.", url)
        self.context += "\n" + text
        retrieved = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        return ToolOutcome(text, None, {"url": url, "title": title, "retrieved_at": retrieved})

    async def aclose(self) -> None:
        return None
