"""``ocm-gateway`` command line: ``ocm-gateway serve [--config FILE] [--host] [--port] ...``."""

from __future__ import annotations

import argparse
import os
import sys

import uvicorn

from app.config import load_config


def _serve(args: argparse.Namespace) -> int:
    if args.config:
        os.environ["OCMGW_CONFIG"] = os.path.abspath(args.config)
    cfg = load_config()  # validate early: a bad config fails here with a clear message
    if not cfg.models:
        print("ocm-gateway: no models configured (use --config FILE, or set OCMGW_MODEL and "
              "OCMGW_BACKEND_URL)", file=sys.stderr)
        return 2
    uvicorn.run(
        "app.http.app:create_app_from_env",
        factory=True,
        host=args.host or cfg.host,
        port=args.port or cfg.port,
        workers=args.workers,
        log_level=args.log_level,
        lifespan="on",
        timeout_graceful_shutdown=int(cfg.shutdown_grace_seconds) + 10,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ocm-gateway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP gateway")
    serve.add_argument("--config", help="TOML config file (default: $OCMGW_CONFIG)")
    serve.add_argument("--host", help="bind address (default from config: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default from config: 8000)")
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--log-level", default="info",
                       choices=["critical", "error", "warning", "info", "debug", "trace"])
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return 2  # pragma: no cover - argparse enforces the choice


if __name__ == "__main__":
    raise SystemExit(main())
