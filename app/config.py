"""Gateway configuration: a TOML file plus environment overrides.

Resolution order (later wins): built-in defaults → TOML file (``--config`` or
``OCMGW_CONFIG``) → generic overrides ``OCMGW__a__b__c=value`` (path segments
separated by ``__``, value parsed as JSON when it parses, else a string) →
convenience variables ``OCMGW_HOST``, ``OCMGW_PORT``, ``OCMGW_WORKERS`` (``auto`` or a count),
``OCMGW_API_KEYS`` (comma-separated keys, hashed on load) and, to define one model
without a file, ``OCMGW_MODEL`` + ``OCMGW_BACKEND_URL`` (comma-separated) with
optional ``OCMGW_BACKEND`` (default ``llamacpp``) and ``OCMGW_CONTEXT_WINDOW``.

Every key carries its ``description`` and every table its docstring: they are the text of the
generated configuration reference (``scripts/gen_reference.py`` →
``docs/reference/configuration.md``), and a test fails when one is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelDefaults(_Strict):
    """Sampling values applied when a request leaves them unset."""

    temperature: float | None = Field(default=None, description="Sampling temperature.")
    top_p: float | None = Field(default=None, description="Nucleus sampling: the probability mass kept.")
    max_tokens: int | None = Field(default=None, ge=1, description="Most tokens generated for one answer.")
    reasoning_effort: Literal["low", "medium", "high"] | None = Field(
        default=None, description="Reasoning effort (Harmony and reasoning models).")


class HarmonySettings(_Strict):
    """The system message of a ``prompt_format = "harmony"`` model (an OpenChatML model reuses
    its identity, knowledge cutoff and date)."""

    model_identity: str = Field(default="You are ChatGPT, a large language model trained by OpenAI.",
                                description="The model's identity, the first line of the system message.")
    knowledge_cutoff: str = Field(default="2024-06", description="The knowledge cutoff the system message "
                                                                 "states (YYYY-MM).")
    current_date: str | None = Field(default=None, description="The date the system message states "
                                                               "(YYYY-MM-DD); unset: today's date (UTC).")


class TemplateSettings(_Strict):
    """``prompt_format = "template"``: the model's Jinja chat template and its tokens (exactly one
    of ``path``, ``builtin``, ``from_backend``)."""

    path: str | None = Field(default=None, description="A .jinja file: the model's chat template "
                                                       "(Hugging Face ``chat_template``).")
    builtin: str | None = Field(default=None, description="Or a template shipped with the gateway "
                                                          "(app/templates/NAME.jinja).")
    from_backend: bool = Field(default=False, description="Or the template llama.cpp reports in "
                                                          "GET /props (with its BOS / EOS tokens).")
    bos_token: str | None = Field(default=None, description="The template's beginning-of-sequence "
                                  "token; unset: a built-in template's own (gemma3: <bos>), else empty.")
    eos_token: str | None = Field(default=None, description="The template's end-of-sequence token; "
                                  "unset: a built-in template's own (gemma3: <eos>), else empty.")


class OpenChatMLSettings(_Strict):
    """``prompt_format = "openchatml"`` (the system message reuses ``[harmony]`` identity,
    knowledge cutoff and date)."""

    require_channels: bool = Field(default=False, description="Model output without a channel is an "
                                                              "error (E-PARSE-CHANNEL-MISSING).")
    document_header: bool = Field(default=True, description="Put the §2 YAML document header at the "
                                                            "top of the prompt.")


class ModelConfig(_Strict):
    """A model the gateway serves, under the name clients ask for (``[models."NAME"]`` in TOML,
    quoted when the name has ``-`` or ``.``)."""

    backend: Literal["llamacpp", "vllm", "ollama", "openai"] = Field(
        default="llamacpp", description="The server behind the model: llama.cpp, vLLM, Ollama, or any "
                                        "OpenAI-compatible API (openai).")
    base_urls: list[str] = Field(min_length=1, description="The backend's replicas: several are served "
                                 "least-outstanding-first, with failover between them.")
    upstream_model: str | None = Field(default=None, description="The backend's own name of the model "
                                       "(vLLM, Ollama, ...); default: this model's name.")
    api_key: str | None = Field(default=None, description="Sent as ``Authorization: Bearer`` to an "
                                                          "OpenAI-compatible upstream.")
    prompt_format: Literal["harmony", "openchatml", "template", "chat"] | None = Field(
        default=None, description="How the prompt is made: Harmony, OpenChatML, the model's chat "
        "template, or chat (messages passed to the backend); default: chat for the ollama and "
        "openai backends, harmony otherwise.")
    context_window: int = Field(default=8192, ge=16, description="The model's context in tokens; a "
                                                                 "prompt beyond it is a 400.")
    gguf: str | None = Field(default=None, description="llamacpp: the model's GGUF file, read for its "
                             "token types (the ids client text must never become). Unset: the file "
                             "llama.cpp reports in /props when this process can read it, else a "
                             "shape-based check.")
    max_inflight: int | None = Field(default=None, ge=1, description="Generations in flight to each "
                                     "replica (one bound for all the workers of serve --workers N "
                                     "without Redis, else per process); the rest wait in the "
                                     "gateway's queue ([limits] max_queue, queue_timeout), where a "
                                     "client that leaves "
                                     "costs the backend nothing. Unset: llamacpp, the replica's /props "
                                     "total_slots plus inflight_margin (read again after it fails); "
                                     "other backends, no bound of their own.")
    inflight_margin: int = Field(default=0, ge=0, description="llamacpp without max_inflight: "
                                 "generations sent to a replica beyond its total_slots (they wait in "
                                 "llama.cpp's own queue).")
    owned_by: str = Field(default="ocm-gateway", description="``owned_by`` of the model in /v1/models.")
    kind: Literal["chat", "embedding"] = Field(
        default="chat", description="embedding: the model only embeds (/v1/embeddings, [knowledge]); a "
        "generation request (chat, responses, messages, completions) naming it is a 400 before any "
        "backend is asked.")
    aliases: list[str] = Field(default=[], description="Other names of the model for the Messages API, "
                                                       "each like an [aliases] entry.")
    defaults: ModelDefaults = Field(default=ModelDefaults(), description="Sampling values applied when "
                                                                         "a request leaves them unset.")
    harmony: HarmonySettings = Field(default=HarmonySettings(), description="The Harmony system message.")
    template: TemplateSettings = Field(default=TemplateSettings(), description="The chat template "
                                       "(prompt_format = \"template\").")
    openchatml: OpenChatMLSettings = Field(default=OpenChatMLSettings(), description="OpenChatML prompts "
                                           "(prompt_format = \"openchatml\").")

    @model_validator(mode="after")
    def _check_format(self) -> ModelConfig:
        chat_backend = self.backend in ("ollama", "openai")
        if self.prompt_format is None:
            self.prompt_format = "chat" if chat_backend else "harmony"
        if chat_backend and self.prompt_format != "chat":
            raise ValueError(f"the {self.backend} backend takes messages: prompt_format must be 'chat'")
        t = self.template
        sources = [t.path is not None, t.builtin is not None, t.from_backend]
        if self.prompt_format == "template" and sum(sources) != 1:
            raise ValueError("prompt_format 'template' needs exactly one of template.path, "
                             "template.builtin, template.from_backend")
        if t.from_backend and self.backend != "llamacpp":
            raise ValueError("template.from_backend reads llama.cpp's /props: backend must be llamacpp")
        if self.gguf is not None and self.backend != "llamacpp":
            raise ValueError("gguf names the vocabulary llama.cpp tokenizes with: backend must be llamacpp")
        if self.gguf is not None and not Path(self.gguf).is_file():
            raise ValueError(f"gguf: no such file {self.gguf!r}")
        if self.prompt_format == "chat" and not chat_backend:
            raise ValueError("prompt_format 'chat' needs a chat-mode backend (ollama, openai)")
        return self


class UpstreamSettings(_Strict):
    """How the gateway reaches its backends: timeouts, attempts across replicas, the pool."""

    connect_timeout: float = Field(default=10.0, description="Seconds to open a connection to a backend.")
    read_timeout: float = Field(default=600.0, description="Seconds a backend may take to send the next "
                                "data, and so the longest silence between two stream events.")
    first_byte_timeout: float = Field(default=300.0, gt=0, description="Seconds until the first stream "
                                      "event (prompt processing), over all attempts together.")
    attempt_timeout: float | None = Field(default=None, gt=0, description="Per attempt: a replica silent "
                                          "this long is abandoned for the next one. Unset: no limit of "
                                          "its own (a stall uses the whole first_byte_timeout and is not "
                                          "failed over).")
    max_connections: int = Field(default=1024, description="Size of the connection pool shared by every "
                                                           "backend, per worker.")
    max_attempts: int = Field(default=3, ge=1, description="Replicas tried when one fails before its "
                                                           "first byte.")
    retry_backoff: float = Field(default=0.05, ge=0, description="Seconds before the second attempt, "
                                                                 "doubling with each further one.")
    cooldown_seconds: float = Field(default=10.0, ge=0, description="A failed replica is skipped this "
                                                                    "long.")


def _default_store_path() -> str:
    """``$XDG_DATA_HOME/ocm-gateway/responses.sqlite3`` (``~/.local/share`` without XDG_DATA_HOME)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "ocm-gateway" / "responses.sqlite3")


class StoreSettings(_Strict):
    """Where responses, conversations, stored chat completions, files, keys and usage are kept,
    and for how long."""

    path: str = Field(default_factory=_default_store_path, description="The SQLite database (WAL); "
                      "uploaded files are kept in files/ beside it. \":memory:\" keeps nothing.")
    url: str | None = Field(default=None, pattern=r"^postgres(ql)?://", description=(
        "postgresql://user@host/db: everything stored there instead (responses, conversations, stored "
        "chat completions, keys, usage), shared by N replicas."))
    heartbeat_seconds: float = Field(default=5.0, gt=0, description="A process marks its stored runs "
                                                                    "in flight alive this often.")
    lost_after_seconds: float = Field(default=30.0, gt=0, description="A run in flight untouched this "
                                      "long (its process died) reads back as failed, code run_lost.")
    response_ttl_seconds: float | None = Field(default=None, gt=0, description="Responses older than "
                                               "this are deleted; unset: kept until deleted.")
    conversation_ttl_seconds: float | None = Field(default=None, gt=0, description="Conversations older "
                                                   "than this are deleted; unset: kept until deleted.")
    cleanup_seconds: float = Field(default=3600.0, gt=0, description="How often every replica runs the "
                                   "retention job (on PostgreSQL one replica at a time does the work).")


class MediaSettings(_Strict):
    """Images and documents a request names by URL (the Messages API's ``url`` sources): fetched
    only from these prefixes (SSRF: the default names none, and a URL source is a 400)."""

    allowed_urls: list[str] = Field(default=[], description="URL prefixes media may be fetched from.")
    allow_private_names: bool = Field(default=False, description="Allow a name in allowed_urls that "
                                      "resolves to a loopback, private or link-local address (the "
                                      "operator's names are meant to be internal).")
    fetch_timeout: float = Field(default=10.0, gt=0, le=120, description="Seconds for the whole fetch "
                                                                         "of one URL.")


class FilesSettings(_Strict):
    """``/v1/files``: uploads, kept as bytes in files/ beside the SQLite database."""

    max_bytes: int = Field(default=512 * 1024 * 1024, ge=1, description="The largest upload in bytes "
                           "(OpenAI's 512 MB), refused while it streams in.")
    sweep_seconds: float = Field(default=60.0, gt=0, description="How often files past their "
                                                                 "expires_after are deleted.")


class BatchSettings(_Strict):
    """``/v1/batches``: the worker that runs batch lines behind interactive traffic."""

    enabled: bool = Field(default=True, description="Run the batch worker in this process (every "
                                                     "replica may).")
    share: float = Field(default=0.25, gt=0, le=1, description="The share of [limits] max_inflight "
                                                               "batch lines may use.")
    max_lines: int = Field(default=50_000, ge=1, le=10_000_000, description="Requests per input file.")
    max_attempts: int = Field(default=5, ge=1, le=100, description="Tries of a line answered 429 or 5xx.")
    backoff_seconds: float = Field(default=1.0, gt=0, le=3600, description="The first retry's wait, "
                                                                           "doubling with each retry.")
    lease_seconds: float = Field(default=30.0, ge=1, le=3600, description="A dead worker's lines are "
                                                                          "taken again after this long.")
    poll_seconds: float = Field(default=1.0, gt=0, le=3600, description="How often the worker looks "
                                                                        "for new lines.")


class LimitSettings(_Strict):
    """Request limits: body size, rates per key, and admission control for the whole process
    (beyond ``max_inflight`` generations requests queue; beyond the queue, 503 + Retry-After)."""

    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, description="The largest request "
                                                                               "body; beyond it a 413.")
    requests_per_minute: int | None = Field(default=None, ge=1, description="Requests a minute per API "
                                            "key (or client address when auth is off); unset: no limit.")
    tokens_per_minute: int | None = Field(default=None, ge=1, description="Tokens a minute per API key "
                                          "(or client address); unset: no limit.")
    max_concurrent: int | None = Field(default=None, ge=1, description="Generations in flight per key; "
                                                                       "unset: no limit.")
    max_n: int = Field(default=8, ge=1, description="Choices (n) one chat completion may ask for; each "
                                                    "is a generation.")
    max_websockets: int = Field(default=16, ge=1, description="Open Responses WebSockets per key (or "
                                                              "client address).")
    max_inflight: int | None = Field(default=None, ge=1, description="Generations in flight in the "
                                     "whole process; default: [upstream] max_connections.")
    max_queue: int = Field(default=1024, ge=0, description="Requests that may wait for a slot; beyond: "
                                                           "503 with Retry-After.")
    queue_timeout: float = Field(default=60.0, gt=0, description="The longest wait for a slot in "
                                                                 "seconds; beyond: 503 with Retry-After.")
    header_timeout: float = Field(default=10.0, gt=0, description="Seconds within which a request head "
                                                                  "must arrive (slow clients).")
    body_timeout: float = Field(default=30.0, gt=0, description="Seconds within which a request body "
                                                                "must arrive; beyond: 408.")
    max_connections: int | None = Field(default=None, ge=1, description="Open connections per worker "
                                        "(default: max_inflight + max_queue + 256); beyond it uvicorn "
                                        "answers 503.")


# Every number an operator sets on a key (here, in /admin/keys, in `ocm-gateway keys`) is
# bounded, so that none is a 500 in a store or a surprise later: integers at most MAX_INT (exact
# in every JSON reader, the console's JavaScript included; below SQLite's INTEGER and
# PostgreSQL's BIGINT, 2**63 - 1), floats finite.
MAX_INT = 2**53 - 1
MAX_LIMIT = 10**12  # requests or tokens a minute, generations in flight
MAX_COST = 1e12  # a budget, in the prices' currency
MAX_PRICE = 1e6  # per million tokens (1 a token)
MAX_EXPIRES_AT = 253_402_300_799  # 9999-12-31T23:59:59Z: every date library can show it
Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT)]
Tokens = Annotated[int, Field(ge=1, le=MAX_INT)]
Cost = Annotated[float, Field(gt=0, le=MAX_COST, allow_inf_nan=False)]
PerMillion = Annotated[float, Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)]
Expiry = Annotated[int, Field(ge=0, le=MAX_EXPIRES_AT)]


class Price(_Strict):
    """What a model's tokens cost, per million (any currency; the console says "cost")."""

    input: PerMillion = Field(default=0.0, description="The price of a million input tokens.")
    output: PerMillion = Field(default=0.0, description="The price of a million output tokens.")


class KeyBudget(_Strict):
    """A key's spending limit per period (UTC calendar day or month, or its whole life): tokens
    (input + output), cost (with the key's ``prices``), or both; over either → 429
    ``insufficient_quota`` until the period resets."""

    period: Literal["day", "month", "total"] = Field(default="month", description="The period the "
                                                     "budget counts over (total: the key's whole life).")
    tokens: Tokens | None = Field(default=None, description="Tokens (input + output) a period; unset: "
                                                            "no token limit.")
    cost: Cost | None = Field(default=None, description="Cost a period, with the key's prices; unset: "
                                                        "no cost limit.")


class ApiKey(_Strict):
    """An API key, stored only as the SHA-256 hex digest of the key. Its ``name`` is its tenant:
    stored responses belong to it (keys that share a name share them, e.g. across a rotation).
    Keys in the store (``/admin/keys``) become one of these, named by their id."""

    name: str = Field(description="The key's tenant: what it stores belongs to this name.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="The SHA-256 hex digest of the key "
                        "(of its text, without a newline).")
    models: list[str] | None = Field(default=None, description="The models the key may use; unset: "
                                                               "every model.")
    requests_per_minute: Limit | None = Field(default=None, description="Overrides [limits] "
                                                                        "requests_per_minute for the key.")
    tokens_per_minute: Limit | None = Field(default=None, description="Overrides [limits] "
                                                                      "tokens_per_minute for the key.")
    max_concurrent: Limit | None = Field(default=None, description="Overrides [limits] max_concurrent "
                                                                   "for the key.")
    budget: KeyBudget | None = Field(default=None, description="The key's spending limit; unset: none.")
    prices: dict[str, Price] = Field(default={}, description="What the key's tokens cost, by model name.")
    expires_at: Expiry | None = Field(default=None, description="Unix time from which the key is "
                                                                "refused; unset: never.")


class AdminSettings(_Strict):
    """The operator's admin API (``/admin``) and console (``/console``): off unless an admin key
    is set (here as a SHA-256 digest, or in plain as ``OCMGW_ADMIN_KEY``). Ordinary API keys
    are never accepted there, nor the admin key on the model APIs."""

    key_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description="The SHA-256 "
                                   "hex digest of the admin key; unset (and no OCMGW_ADMIN_KEY): no "
                                   "admin API.")
    console: bool = Field(default=True, description="Serve /console (the admin API stays on without it).")


class UsageSettings(_Strict):
    """Usage accounting per key × model × hour and day (app/http/usage.py): kept in memory and
    written to the store every ``flush_seconds`` (and on shutdown): a crash loses at most that."""

    enabled: bool = Field(default=True, description="Count usage (and so enforce key budgets).")
    flush_seconds: float = Field(default=5.0, gt=0, description="How often the counts are written to "
                                                                "the store.")
    hourly_days: int = Field(default=7, ge=1, description="Days hourly rows are kept (daily ones are "
                                                          "kept forever).")
    budget_refresh_seconds: float = Field(default=2.0, gt=0, description="How old a key's spend read "
                                          "from the store may be when its budget is checked (the spend "
                                          "of other replicas shows after their flush plus this).")


class HttpSettings(_Strict):
    """Browser-facing HTTP: CORS (off unless origins are listed) and the Swagger UI; and the
    server's HTTP/1.1 protocol, ``h11`` (pure Python) or ``httptools`` (C), either with the
    same guards (app/http/server.py)."""

    protocol: Literal["h11", "httptools"] = Field(default="httptools", description="The server's "
                                                  "HTTP/1.1 parser: httptools (C; measured ~5-15 % less "
                                                  "CPU per request) or h11 (pure Python).")
    cors_origins: list[str] = Field(default=[], description="Origins CORS allows, e.g. "
                                    "[\"https://app.example.com\"]; [\"*\"] for any; empty: CORS off.")
    cors_allow_credentials: bool = Field(default=False, description="Allow credentials on CORS "
                                                                    "requests.")
    docs: bool = Field(default=True, description="Serve the Swagger UI at /docs (the page loads its "
                                                 "script from a CDN).")


class ResponsesSettings(_Strict):
    """The Responses API: its streaming event names and the key sealing ``encrypted_content``."""

    event_dialect: Literal["auto", "openresponses", "openai"] = Field(
        default="auto", description="Streaming event names: auto answers OpenAI's SDKs in OpenAI's "
        "names and every other client in the Open Responses document's.")
    encryption_key: str | None = Field(default=None, description=(
        "AES-256-GCM key (32 bytes, base64: `openssl rand -base64 32`) sealing encrypted_content of "
        "reasoning and compaction items. Unset: a random key per process (a warning at startup; "
        "tokens do not survive a restart or reach another worker)."))
    previous_encryption_keys: list[str] = Field(default=[], description="Keys used before a rotation: "
                                                "what they sealed can still be opened.")
    encryption_key_required: bool = Field(default=False, description="Refuse to start without "
                                          "encryption_key (N replicas must share one).")

    @model_validator(mode="after")
    def _key_when_required(self) -> ResponsesSettings:
        if self.encryption_key_required and not (self.encryption_key or "").strip():
            raise ValueError("[responses] encryption_key is required here (every replica seals with "
                             "it): set OCMGW__responses__encryption_key (openssl rand -base64 32)")
        return self


class McpServerConfig(_Strict):
    """An MCP server the operator offers by label: a request names it with ``server_label``
    alone (``server_url`` may be left out) and never sees its headers."""

    url: str = Field(description="The server's URL.")
    headers: dict[str, str] = Field(default={}, description="HTTP headers sent to the server "
                                                            "(credentials; never shown to requests).")
    description: str | None = Field(default=None, description="What the server offers, for the model.")
    require_approval: Literal["always", "never"] | None = Field(
        default=None, description="Whether its calls need approval; unset: what the request says.")


class McpSettings(_Strict):
    """Hosted ``mcp`` tools: the servers a request may reach."""

    allowed_urls: list[str] = Field(default=[], description="URL prefixes a request's own server_url "
                                                            "may name (SSRF: the default names none).")
    allow_private_names: bool = Field(default=False, description="Allow a name in allowed_urls that "
                                      "resolves to a loopback, private or link-local address.")
    servers: dict[str, McpServerConfig] = Field(default={}, description="Servers offered by label.")
    max_tools_per_request: int = Field(default=20, ge=1, le=1000, description="mcp tools one request "
                                       "may offer (beyond: 400 array_above_max_length); tools naming "
                                       "one server share its session.")


class WebSearchSettings(_Strict):
    """``web_search`` (app/tools/web.py): an offline full-text index of the operator's documents,
    an MCP server that searches, or a SearXNG instance. None set: the tool is not run."""

    documents: str | None = Field(default=None, description="A JSONL file or a folder of .jsonl / "
                                                            ".html / .md / .txt files to index.")
    index: str | None = Field(default=None, description="Where the built index lives; default: the "
                                                        "system's temporary directory.")
    mcp_server: str | None = Field(default=None, description="Or an MCP server that searches: a label "
                                                             "of [tools.mcp.servers].")
    mcp_search_tool: str = Field(default="search", description="Its search tool, called with "
                                                               "{\"query\": ...}.")
    mcp_open_tool: str | None = Field(default=None, description="Its tool that opens a page, called with "
                                      "{\"url\": ...}; unset: pages cannot be opened.")
    mcp_external: bool = Field(default=True, description="Whether it searches the live web "
                                                         "(external_web_access: false refuses it).")
    searxng_url: str | None = Field(default=None, description="Or a SearXNG instance's JSON API, e.g. "
                                                              "http://searxng:8080.")
    searxng_categories: str | None = Field(default=None, description="SearXNG categories, e.g. "
                                                                     "\"general,it\".")
    searxng_language: str | None = Field(default=None, description="SearXNG language, e.g. \"en\".")
    searxng_timeout: float = Field(default=10.0, gt=0, description="Seconds for one SearXNG query.")


class CodeInterpreterSettings(_Strict):
    """``code_interpreter`` (app/tools/code.py): the sandbox service (``ocm-gateway sandbox``).
    Unset ``url``: the tool is not run."""

    url: str | None = Field(default=None, description="The sandbox's URL, e.g. http://sandbox:8090 "
                                                      "(compose service).")
    token: str | None = Field(default=None, description="The sandbox's --token.")
    timeout: float = Field(default=120.0, gt=0, description="Seconds for one run, end to end (the "
                                                            "sandbox stops it earlier).")


class ToolSettings(_Strict):
    """The agentic loop of /v1/responses (hosted tools) and its bounds."""

    max_rounds: int = Field(default=8, ge=1, description="Generations per response when tools are run.")
    deadline_seconds: float = Field(default=300.0, gt=0, description="Wall clock per response with "
                                                                     "hosted tools.")
    call_timeout: float = Field(default=60.0, gt=0, description="Seconds for one tool call.")
    connect_timeout: float = Field(default=10.0, gt=0, description="Seconds to reach and list a tool "
                                                                   "server.")
    max_parallel: int = Field(default=4, ge=1, description="Hosted calls of one step run at once.")
    max_output_chars: int = Field(default=32_768, ge=256, description="A tool's output as the model "
                                                                      "sees it, in characters.")
    mcp: McpSettings = McpSettings()
    web_search: WebSearchSettings = WebSearchSettings()
    code_interpreter: CodeInterpreterSettings = CodeInterpreterSettings()


class KnowledgeSettings(_Strict):
    """Vector stores and ``file_search`` (app/knowledge): the embedding model and the
    background ingestion.  Unset ``embedding_model``: vectors cannot be made (the embedded
    quickstart sets one, all-MiniLM-L6-v2)."""

    embedding_model: str | None = Field(default=None, description=(
        "A model of [models] whose backend serves embeddings. A vector store keeps the model it was "
        "made with, and is refused (409 embedding_model_changed) once another one is configured."))
    embedding_dimensions: int | None = Field(default=None, ge=1, le=65_536, description="Dimensions "
                                             "asked of the model (Matryoshka models); unset: its own.")
    embedding_batch: int = Field(default=32, ge=1, le=2048, description="Texts per upstream request.")
    max_input_tokens: int = Field(default=512, ge=16, le=1_000_000, description=(
        "The longest text the model embeds, in its tokens: chunks are capped to it (OpenAI's auto "
        "800 / 400 becomes at most this / half); all-MiniLM-L6-v2: 256."))
    ingest_concurrency: int = Field(default=1, ge=1, le=64, description="Files embedded at once per "
                                                                        "replica.")
    ingest_poll_seconds: float = Field(default=1.0, gt=0, le=3600, description="How often the job "
                                                                               "queue is read.")
    ingest_lease_seconds: float = Field(default=300.0, gt=0, le=86_400, description="A claimed job "
                                        "untouched this long (its replica died) is claimed again.")


class RedisSettings(_Strict):
    """Shared coordination of N replicas (app/http/counters.py): per-key limits counted in Redis,
    cancels and cooldowns published, background runs followed live from any replica."""

    url: str | None = Field(default=None, pattern=r"^rediss?://", description="redis://host:6379/0; "
                            "unset: this process counts alone.")
    on_failure: Literal["open", "closed"] = Field(default="open", description="Redis unreachable: admit "
                                                  "uncounted (open) or answer 503 (closed).")
    lease_seconds: float = Field(default=900.0, gt=0, description="A dead replica's concurrency slots "
                                                                  "are freed after this long.")


class AuthSettings(_Strict):
    """API keys for the model APIs. No keys and no admin key: authentication is off."""

    keys: list[ApiKey] = Field(default=[], description="Keys of the file, each a [[auth.keys]] table.")
    key_cache_seconds: float = Field(default=5.0, ge=0, le=60, description=(
        "Keys created through /admin/keys live in the store; a replica holds what it read about one "
        "(found, revoked, unknown) at most this long."))


class GatewayConfig(_Strict):
    """The gateway's configuration: the top-level keys and one table per section."""

    host: str = Field(default="127.0.0.1", description="The address to listen on.")
    port: int = Field(default=8000, description="The port to listen on.")
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(default="auto", description=(
        "Worker processes of `ocm-gateway serve` (what `--workers` sets; `OCMGW_WORKERS` too, "
        "the flag first): a count, or \"auto\" (the default) for the CPUs the process may use, "
        "at most 8 and what its memory holds at 320 MiB a worker (1 with a :memory: store or "
        "--embedded)."))
    upstream: UpstreamSettings = UpstreamSettings()
    store: StoreSettings = StoreSettings()
    files: FilesSettings = FilesSettings()
    media: MediaSettings = MediaSettings()
    batches: BatchSettings = BatchSettings()
    auth: AuthSettings = AuthSettings()
    limits: LimitSettings = LimitSettings()
    http: HttpSettings = HttpSettings()
    responses: ResponsesSettings = ResponsesSettings()
    tools: ToolSettings = ToolSettings()
    knowledge: KnowledgeSettings = KnowledgeSettings()
    redis: RedisSettings = RedisSettings()
    admin: AdminSettings = AdminSettings()
    usage: UsageSettings = UsageSettings()
    default_model: str | None = Field(default=None, description="The model of /invocations bodies "
                                                                "without \"model\".")
    shutdown_grace_seconds: float = Field(default=10.0, ge=0, description="On SIGTERM, in-flight "
                                                                          "streams get this long to finish.")
    models: dict[str, ModelConfig] = Field(default={}, description="The models served, by the name "
                                                                   "clients ask for.")
    aliases: dict[str, str] = Field(default={}, description=(
        "Other names of models, alias → model (Claude Code asks for \"claude-sonnet-4-5\", ...): "
        "resolved by the Messages API before the key's allow-list and the route."))

    @model_validator(mode="after")
    def _aliases_name_models(self) -> GatewayConfig:
        for name, model in self.models.items():  # per-model aliases = [...] join [aliases]
            for alias in model.aliases:
                if self.aliases.get(alias, name) != name:
                    raise ValueError(f"alias {alias!r} names both {self.aliases[alias]!r} and {name!r}")
                self.aliases[alias] = name
        for alias, target in self.aliases.items():
            if target not in self.models:
                raise ValueError(f"[aliases] {alias!r} names model {target!r}, which is not configured")
            if alias in self.models:
                raise ValueError(f"[aliases] {alias!r} is already the name of a model")
        embedding = self.knowledge.embedding_model
        if embedding is not None and embedding not in self.models:
            raise ValueError(f"[knowledge] embedding_model {embedding!r} is not a model of [models]")
        return self


def _parse_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _norm(key: str) -> str:
    return key.lower().replace("-", "_").replace(".", "_")


def _existing_key(node: dict[str, Any], key: str) -> str:
    """``key`` as spelled in ``node``: an environment variable name cannot hold ``-`` or ``.``,
    so ``OCMGW__models__gpt_oss_20b__...`` reaches the model ``gpt-oss-20b`` of the file."""
    if key in node:
        return key
    matches = [k for k in node if _norm(k) == _norm(key)]
    return matches[0] if len(matches) == 1 else key


def _set_path(tree: dict[str, Any], path: list[str], value: Any) -> None:
    node = tree
    for key in path[:-1]:
        key = _existing_key(node, key)
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[_existing_key(node, path[-1])] = value


def apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    for key, raw in sorted(env.items()):
        if key.startswith("OCMGW__") and len(key) > 7:
            _set_path(data, key[7:].split("__"), _parse_value(raw))
    if "OCMGW_HOST" in env:
        data["host"] = env["OCMGW_HOST"]
    if "OCMGW_PORT" in env:
        data["port"] = int(env["OCMGW_PORT"])
    if env.get("OCMGW_WORKERS", "").strip():  # "auto" (any case) or a count; checked by the model
        raw = env["OCMGW_WORKERS"].strip()
        data["workers"] = "auto" if raw.lower() == "auto" else _parse_value(raw)
    plain_keys = [k.strip() for k in env.get("OCMGW_API_KEYS", "").split(",") if k.strip()]
    if plain_keys:
        keys = data.setdefault("auth", {}).setdefault("keys", [])
        digests = [hashlib.sha256(k.encode()).hexdigest() for k in plain_keys]
        # The name is the key's tenant (what its stored responses belong to): derived from the
        # key, so it survives reordering the list.
        keys += [{"name": f"env-{d[:16]}", "sha256": d} for d in digests]
    admin_key = env.get("OCMGW_ADMIN_KEY", "").strip()
    if admin_key:
        data.setdefault("admin", {})["key_sha256"] = hashlib.sha256(admin_key.encode()).hexdigest()
    name = env.get("OCMGW_MODEL")
    if name:
        models = data.setdefault("models", {})
        model = models.setdefault(_existing_key(models, name), {})
        if env.get("OCMGW_BACKEND_URL"):
            model["base_urls"] = [u.strip() for u in env["OCMGW_BACKEND_URL"].split(",") if u.strip()]
        if env.get("OCMGW_BACKEND"):
            model["backend"] = env["OCMGW_BACKEND"]
        if env.get("OCMGW_CONTEXT_WINDOW"):
            model["context_window"] = int(env["OCMGW_CONTEXT_WINDOW"])
    return data


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None,
                ) -> GatewayConfig:
    env = os.environ if env is None else env
    path = path or env.get("OCMGW_CONFIG")
    data: dict[str, Any] = {}
    if path:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    return GatewayConfig.model_validate(apply_env(data, env))
