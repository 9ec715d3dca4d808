"""``ocm-gateway conformance``: point it at any Open Responses / OpenAI-compatible server.

``ocm-gateway conformance --base-url http://host:port/v1 --model M [--api-key K]
[--only PATTERN] [--json] [--timeout S] [--enable-offline-web-search]
[--file-search-vector-store ID]`` runs the Open
Responses compliance tests
(:mod:`.responses`, :mod:`.websocket`) and a Chat Completions section (:mod:`.chat`), each with
three verdicts: the test's own assertions, strict schema validation (:mod:`.spec`) and wire
order (:mod:`.wire`).  It prints a table (or JSON) and exits 0 only when every test that ran
passed.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from urllib.parse import urlsplit

from app.cli.conformance import chat, responses, runner, spec
from app.cli.conformance.transport import Client


def all_cases() -> list[runner.TestCase]:
    return [*responses.cases(), *chat.cases()]


def select(cases: list[runner.TestCase], patterns: list[str] | None) -> list[runner.TestCase]:
    """``--only``: comma-separated shell patterns on ``id`` or ``section/id``."""
    if not patterns:
        return cases
    wanted = [p.strip() for arg in patterns for p in arg.split(",") if p.strip()]
    return [c for c in cases if any(fnmatch.fnmatchcase(c.id, p)
                                    or fnmatch.fnmatchcase(f"{c.section}/{c.id}", p) for p in wanted)]


def api_root(url: str) -> str:
    """The API root: ``http://host:8000`` means ``http://host:8000/v1``."""
    url = url.rstrip("/")
    return url + "/v1" if urlsplit(url).path in ("", "/") else url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", required=True, help="API root, e.g. http://127.0.0.1:8000/v1 "
                                                          "(a bare host:port gets /v1)")
    parser.add_argument("--model", required=True, help="model id to send")
    parser.add_argument("--api-key", default=None, help="sent as Authorization: Bearer KEY")
    parser.add_argument("--only", action="append", metavar="PATTERN",
                        help="run only tests whose id (or section/id) matches; comma-separated shell "
                             "patterns, repeatable (e.g. 'websocket-*,chat/*')")
    parser.add_argument("--json", action="store_true", help="machine output on stdout")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default 60)")
    parser.add_argument("--list", action="store_true", help="list the tests and exit")
    parser.add_argument("--enable-offline-web-search", action="store_true",
                        help="run the optional offline-web-search test (the server needs a search index)")
    parser.add_argument("--file-search-vector-store", metavar="ID", default=None,
                        help="the vector store the file-search test searches (default: the run "
                             "uploads a small file, makes a store of it and deletes both after; "
                             "not applicable when the server has no vector stores or no embedding model)")


def run(args: argparse.Namespace) -> int:
    cases = select(all_cases(), args.only)
    if args.list:
        for c in cases:
            print(f"{c.section + '/' + c.id:<56} {c.origin:<6} {c.name}")
        return 0
    if not cases:
        print(f"ocm-gateway conformance: no test matches {args.only}", file=sys.stderr)
        return 2
    notes = [n for ok, n in ((spec.available(), spec.MISSING), (chat.sdk_available(), chat.SDK_MISSING))
             if not ok]
    for note in notes:
        print(f"ocm-gateway conformance: {note}", file=sys.stderr)
    base = api_root(args.base_url)
    client = Client(base, args.api_key, args.timeout)
    ctx = responses.Context(client, args.model, args.enable_offline_web_search,
                            args.file_search_vector_store)
    results: list[runner.Result] = []
    try:
        for case in cases:
            result = runner.run_case(case, ctx)
            results.append(result)
            if not args.json and sys.stderr.isatty():
                print(f"  {result.status:<7} {case.section}/{case.id}", file=sys.stderr)
    finally:
        client.close()
    meta = {"base_url": base, "model": args.model, "spec_version": spec.document()["info"]["version"],
            "notes": notes}
    if args.json:
        print(runner.to_json(results, meta))
    else:
        print(f"Open Responses {meta['spec_version']} conformance: {base}, model {args.model}\n")
        print(runner.table(results))
        s = runner.summary(results)
        print(f"\n{s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped of {s['total']} "
              f"({s['events']} events)")
    return runner.exit_status(results)


DESCRIPTION = """\
Run the Open Responses compliance tests and a Chat Completions section against any
OpenAI-compatible server. Each test has three verdicts: its own assertions, strict schema
validation and wire order. Prints a table (or JSON with --json); exits 0 only when every
test that ran passed.

example:
  ocm-gateway conformance --base-url http://127.0.0.1:8000/v1 --model gpt-oss-20b"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ocm-gateway conformance", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


__all__ = ["DESCRIPTION", "add_arguments", "all_cases", "api_root", "main", "run", "select"]
