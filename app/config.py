"""Gateway configuration: a TOML file plus environment overrides.

Resolution order (later wins): built-in defaults → TOML file (``--config`` or
``OCMGW_CONFIG``) → generic overrides ``OCMGW__a__b__c=value`` (path segments
separated by ``__``, value parsed as JSON when it parses, else a string) →
convenience variables ``OCMGW_HOST``, ``OCMGW_PORT``, ``OCMGW_API_KEYS`` (comma-separated
keys, hashed on load) and, to define one model
without a file, ``OCMGW_MODEL`` + ``OCMGW_BACKEND_URL`` (comma-separated) with
optional ``OCMGW_BACKEND`` (default ``llamacpp``) and ``OCMGW_CONTEXT_WINDOW``.
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
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    reasoning_effort: Literal["low", "medium", "high"] | None = None


class HarmonySettings(_Strict):
    model_identity: str = "You are ChatGPT, a large language model trained by OpenAI."
    knowledge_cutoff: str = "2024-06"
    current_date: str | None = None


class TemplateSettings(_Strict):
    """``prompt_format = "template"``: the model's Jinja chat template and its tokens."""

    path: str | None = None  # a .jinja file (HF ``chat_template``)
    builtin: str | None = None  # or a template shipped with the gateway (app/templates/NAME.jinja)
    from_backend: bool = False  # or the one llama.cpp reports in GET /props (with its bos / eos)
    # unset: a built-in template's own tokens (gemma3: <bos> / <eos>), else empty
    bos_token: str | None = None
    eos_token: str | None = None


class OpenChatMLSettings(_Strict):
    """``prompt_format = "openchatml"`` (the system message reuses ``[harmony]`` identity,
    knowledge cutoff and date)."""

    require_channels: bool = False  # E-PARSE-CHANNEL-MISSING for output without a channel
    document_header: bool = True  # the §2 YAML document header at the top of the prompt


class ModelConfig(_Strict):
    backend: Literal["llamacpp", "vllm", "ollama", "openai"] = "llamacpp"
    base_urls: list[str] = Field(min_length=1)
    upstream_model: str | None = None  # the backend's own model name (vLLM, Ollama, ...); default: this key
    api_key: str | None = None  # sent as Authorization: Bearer to an OpenAI-compatible upstream
    # default: "chat" for chat-mode backends (ollama, openai), "harmony" otherwise
    prompt_format: Literal["harmony", "openchatml", "template", "chat"] | None = None
    context_window: int = Field(default=8192, ge=16)
    # llamacpp: the model's GGUF file, read for its token types (which ids are added or
    # control tokens that client text must never become).  Unset: the file llama.cpp reports
    # in /props (model_path) when this process can read it, else a shape-based check.
    gguf: str | None = None
    owned_by: str = "ocm-gateway"
    # "embedding": the model only embeds (/v1/embeddings, [knowledge]); a generation request
    # (chat, responses, messages, completions) naming it is a 400 before any backend is asked
    kind: Literal["chat", "embedding"] = "chat"
    # other names of this model for the Messages API, like an [aliases] entry each
    aliases: list[str] = []
    defaults: ModelDefaults = ModelDefaults()
    harmony: HarmonySettings = HarmonySettings()
    template: TemplateSettings = TemplateSettings()
    openchatml: OpenChatMLSettings = OpenChatMLSettings()

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
    connect_timeout: float = 10.0
    read_timeout: float = 600.0  # also the longest silence allowed between two stream events
    # until the first stream event (prompt processing), over all attempts together
    first_byte_timeout: float = Field(default=300.0, gt=0)
    # per attempt: a replica silent this long is abandoned for the next one (None: no limit
    # of its own, so a stall uses the whole first_byte_timeout and is not failed over)
    attempt_timeout: float | None = Field(default=None, gt=0)
    max_connections: int = 256
    max_attempts: int = Field(default=3, ge=1)  # replicas tried before the first byte
    retry_backoff: float = Field(default=0.05, ge=0)
    cooldown_seconds: float = Field(default=10.0, ge=0)  # a failed replica is skipped this long


def _default_store_path() -> str:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "ocm-gateway" / "responses.sqlite3")


class StoreSettings(_Strict):
    path: str = Field(default_factory=_default_store_path)  # ":memory:" keeps nothing
    # postgresql://user@host/db: everything stored there (responses, conversations, stored chat
    # completions, keys, usage), shared by N replicas (app/stores/postgres.py)
    url: str | None = Field(default=None, pattern=r"^postgres(ql)?://")
    # A process marks its stored runs in flight alive every heartbeat_seconds; one untouched for
    # lost_after_seconds (its process died) reads back as failed with code run_lost.
    heartbeat_seconds: float = Field(default=5.0, gt=0)
    lost_after_seconds: float = Field(default=30.0, gt=0)
    # Retention (None: kept until deleted): what is older is deleted by a job every replica
    # runs every cleanup_seconds (on PostgreSQL one replica at a time does the work).
    response_ttl_seconds: float | None = Field(default=None, gt=0)
    conversation_ttl_seconds: float | None = Field(default=None, gt=0)
    cleanup_seconds: float = Field(default=3600.0, gt=0)


class MediaSettings(_Strict):
    """Images and documents a request names by URL (the Messages API's ``url`` sources): fetched
    only from these prefixes (SSRF: the default names none, and a URL source is a 400)."""

    allowed_urls: list[str] = []
    # a name in allowed_urls that resolves to a loopback / private / link-local address is
    # refused unless this says the operator's names are meant to be internal
    allow_private_names: bool = False
    fetch_timeout: float = Field(default=10.0, gt=0, le=120)  # the whole fetch of one URL


class FilesSettings(_Strict):
    # /v1/files: the largest upload (OpenAI's 512 MB), refused while it streams in
    max_bytes: int = Field(default=512 * 1024 * 1024, ge=1)
    sweep_seconds: float = Field(default=60.0, gt=0)  # how often expired files are deleted


class BatchSettings(_Strict):
    # /v1/batches: the worker that runs batch lines behind interactive traffic (app/batches)
    enabled: bool = True  # run the worker in this process (every replica may)
    share: float = Field(default=0.25, gt=0, le=1)  # of [limits] max_inflight, for batch lines
    max_lines: int = Field(default=50_000, ge=1, le=10_000_000)  # requests per input file
    max_attempts: int = Field(default=5, ge=1, le=100)  # tries of a line answered 429/5xx
    backoff_seconds: float = Field(default=1.0, gt=0, le=3600)  # first retry's wait, doubling
    lease_seconds: float = Field(default=30.0, ge=1, le=3600)  # a dead worker's lines are retaken
    poll_seconds: float = Field(default=1.0, gt=0, le=3600)


class LimitSettings(_Strict):
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    requests_per_minute: int | None = Field(default=None, ge=1)  # per API key (or client address)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    max_concurrent: int | None = Field(default=None, ge=1)  # generations in flight per key
    max_n: int = Field(default=8, ge=1)  # choices per chat completion (n); each is a generation
    max_websockets: int = Field(default=16, ge=1)  # open Responses WebSockets per key (or address)
    # Admission control for the whole gateway process: generations in flight (default: the
    # upstream connection pool size), how many may wait for a slot, and for how long; beyond
    # either bound a request is a 503 with Retry-After.
    max_inflight: int | None = Field(default=None, ge=1)
    max_queue: int = Field(default=1024, ge=0)
    queue_timeout: float = Field(default=60.0, gt=0)
    # Slow clients: a request head must arrive within header_timeout seconds, a body within
    # body_timeout (408); open connections per worker are capped at max_connections (default:
    # max_inflight + max_queue + 256; beyond it uvicorn answers 503).
    header_timeout: float = Field(default=10.0, gt=0)
    body_timeout: float = Field(default=30.0, gt=0)
    max_connections: int | None = Field(default=None, ge=1)


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

    input: PerMillion = 0.0
    output: PerMillion = 0.0


class KeyBudget(_Strict):
    """A key's spending limit per period (UTC calendar day or month, or its whole life): tokens
    (input + output), cost (with the key's ``prices``), or both; over either → 429
    ``insufficient_quota`` until the period resets."""

    period: Literal["day", "month", "total"] = "month"
    tokens: Tokens | None = None
    cost: Cost | None = None


class ApiKey(_Strict):
    """An API key, stored only as the SHA-256 hex digest of the key. Its ``name`` is its tenant:
    stored responses belong to it (keys that share a name share them, e.g. across a rotation).
    Keys in the store (``/admin/keys``) become one of these, named by their id."""

    name: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    models: list[str] | None = None  # None: every model
    requests_per_minute: Limit | None = None  # override [limits] for this key
    tokens_per_minute: Limit | None = None
    max_concurrent: Limit | None = None
    budget: KeyBudget | None = None
    prices: dict[str, Price] = {}  # by model name
    expires_at: Expiry | None = None  # Unix time; refused from then on


class AdminSettings(_Strict):
    """The operator's admin API (``/admin``) and console (``/console``): off unless an admin key
    is set (here as a SHA-256 digest, or in plain as ``OCMGW_ADMIN_KEY``). Ordinary API keys
    are never accepted there, nor the admin key on the model APIs."""

    key_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    console: bool = True  # serve /console (the admin API stays on without it)


class UsageSettings(_Strict):
    """Usage accounting per key × model × hour and day (app/http/usage.py): kept in memory and
    written to the store every ``flush_seconds`` (and on shutdown): a crash loses at most that."""

    enabled: bool = True
    flush_seconds: float = Field(default=5.0, gt=0)
    hourly_days: int = Field(default=7, ge=1)  # hourly rows are kept this long, daily ones forever
    # how old a key's spend read from the store may be when its budget is checked (the spend of
    # other replicas shows after their flush plus this)
    budget_refresh_seconds: float = Field(default=2.0, gt=0)


class HttpSettings(_Strict):
    """Browser-facing HTTP: CORS (off unless origins are listed) and the Swagger UI."""

    cors_origins: list[str] = []  # e.g. ["https://app.example.com"]; ["*"] for any origin
    cors_allow_credentials: bool = False
    docs: bool = True  # Swagger UI at /docs (the page loads its script from a CDN)


class ResponsesSettings(_Strict):
    # Streaming event names: "auto" answers OpenAI's SDKs in OpenAI's names and everyone else
    # in the Open Responses document's (app/api/responses/dialect.py).
    event_dialect: Literal["auto", "openresponses", "openai"] = "auto"
    # AES-256-GCM key (32 bytes, base64; `openssl rand -base64 32`) sealing encrypted_content of
    # reasoning and compaction items (app/items/sealing.py). Unset: a random key per
    # process (a warning at startup; tokens do not survive a restart or reach another worker).
    encryption_key: str | None = None
    previous_encryption_keys: list[str] = []  # still open tokens sealed before a key rotation
    # true: no start without encryption_key (N replicas share one; the scale deployments)
    encryption_key_required: bool = False

    @model_validator(mode="after")
    def _key_when_required(self) -> ResponsesSettings:
        if self.encryption_key_required and not (self.encryption_key or "").strip():
            raise ValueError("[responses] encryption_key is required here (every replica seals with "
                             "it): set OCMGW__responses__encryption_key (openssl rand -base64 32)")
        return self


class McpServerConfig(_Strict):
    """An MCP server the operator offers by label: a request names it with ``server_label``
    alone (``server_url`` may be left out) and never sees its headers."""

    url: str
    headers: dict[str, str] = {}
    description: str | None = None
    require_approval: Literal["always", "never"] | None = None  # None: what the request says


class McpSettings(_Strict):
    # URL prefixes a request's own ``server_url`` may name (SSRF: the default names none)
    allowed_urls: list[str] = []
    # a name in allowed_urls that resolves to a loopback / private / link-local address is
    # refused unless this says the operator's names are meant to be internal
    allow_private_names: bool = False
    servers: dict[str, McpServerConfig] = {}
    # mcp tools one request may offer (a 400 array_above_max_length beyond); tools naming one
    # server share its session, but each is listed and shown to the model
    max_tools_per_request: int = Field(default=20, ge=1, le=1000)


class WebSearchSettings(_Strict):
    """``web_search`` (:mod:`app.tools.web`): an offline full-text index of the operator's documents
    (:mod:`app.tools.search_index`).  Unset ``documents``: the tool is not run (see the README)."""

    documents: str | None = None  # a JSONL file or a folder of .jsonl / .html / .md / .txt
    index: str | None = None  # where the built index lives (default: the system's temp directory)
    # or an MCP server that offers search (a label of [tools.mcp.servers]; app/tools/search_mcp.py)
    mcp_server: str | None = None
    mcp_search_tool: str = "search"  # called with {"query": ...}
    mcp_open_tool: str | None = None  # called with {"url": ...}; unset: pages cannot be opened
    mcp_external: bool = True  # whether it searches the live web (external_web_access: false refuses)
    # or a SearXNG instance's JSON API (app/tools/search_searxng.py), e.g. http://searxng:8080
    searxng_url: str | None = None
    searxng_categories: str | None = None  # e.g. "general,it"
    searxng_language: str | None = None  # e.g. "en"
    searxng_timeout: float = Field(default=10.0, gt=0)


class CodeInterpreterSettings(_Strict):
    """``code_interpreter`` (:mod:`app.tools.code`): the sandbox service (``ocm-gateway sandbox``).
    Unset ``url``: the tool is not run (see the README)."""

    url: str | None = None  # e.g. http://sandbox:8090 (compose service)
    token: str | None = None  # the sandbox's --token
    timeout: float = Field(default=120.0, gt=0)  # one run, end to end (the sandbox stops it earlier)


class ToolSettings(_Strict):
    """The agentic loop of /v1/responses (hosted tools) and its bounds."""

    max_rounds: int = Field(default=8, ge=1)  # generations per response when tools are run
    deadline_seconds: float = Field(default=300.0, gt=0)  # wall clock per response with hosted tools
    call_timeout: float = Field(default=60.0, gt=0)  # one tool call
    connect_timeout: float = Field(default=10.0, gt=0)  # reaching and listing a tool server
    max_parallel: int = Field(default=4, ge=1)  # hosted calls of one step run at once
    max_output_chars: int = Field(default=32_768, ge=256)  # a tool's output as the model sees it
    mcp: McpSettings = McpSettings()
    web_search: WebSearchSettings = WebSearchSettings()
    code_interpreter: CodeInterpreterSettings = CodeInterpreterSettings()


class KnowledgeSettings(_Strict):
    """Vector stores and ``file_search`` (:mod:`app.knowledge`): the embedding model and the
    background ingestion.  Unset ``embedding_model``: vectors cannot be made (the embedded
    quickstart sets one, all-MiniLM-L6-v2)."""

    # a model of [models] whose backend serves embeddings (llama.cpp --embeddings, vLLM, Ollama,
    # any OpenAI-compatible server); a vector store keeps the model it was made with, and is
    # refused (409 embedding_model_changed) once another one is configured
    embedding_model: str | None = None
    embedding_dimensions: int | None = Field(default=None, ge=1, le=65_536)  # Matryoshka models
    embedding_batch: int = Field(default=32, ge=1, le=2048)  # texts per upstream request
    # the longest text the model embeds, in its own tokens: chunks are capped to it (OpenAI's
    # `auto` 800 / 400 becomes at most this / half); all-MiniLM-L6-v2: 256 (512 positions)
    max_input_tokens: int = Field(default=512, ge=16, le=1_000_000)
    ingest_concurrency: int = Field(default=1, ge=1, le=64)  # files embedded at once per replica
    ingest_poll_seconds: float = Field(default=1.0, gt=0, le=3600)  # how often the job queue is read
    # a claimed job untouched this long (its replica died) is claimed again by another
    ingest_lease_seconds: float = Field(default=300.0, gt=0, le=86_400)


class RedisSettings(_Strict):
    """Shared coordination of N replicas (app/http/counters.py): per-key limits counted in Redis."""

    url: str | None = Field(default=None, pattern=r"^rediss?://")  # None: this process counts
    on_failure: Literal["open", "closed"] = "open"  # Redis unreachable: admit uncounted, or 503
    lease_seconds: float = Field(default=900.0, gt=0)  # a dead replica's concurrency slots free after


class AuthSettings(_Strict):
    keys: list[ApiKey] = []  # empty (and no admin key): no authentication
    # keys created through /admin/keys live in the store; a replica holds what it read about
    # one (found, revoked, unknown) at most this long
    key_cache_seconds: float = Field(default=5.0, ge=0, le=60)


class GatewayConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = 8000
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
    default_model: str | None = None  # for /invocations bodies without "model"
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)  # in-flight streams get this long
    models: dict[str, ModelConfig] = {}
    # other names of models, alias -> model (Claude Code asks for "claude-sonnet-4-5", ...):
    # resolved by the Messages API (/v1/messages) before the key's allow-list and the route
    aliases: dict[str, str] = {}

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
