"""``ocm-gateway template analyze FILE.jinja``: print what the analysis detected.

``run(argv)`` takes the arguments after ``template`` (a leading ``analyze`` is
optional) and prints one ``key: value`` line per detected mode or marker (values
JSON-quoted so whitespace is visible), or the whole summary as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.formats.template.analysis.analysis import analyze

DESCRIPTION = """\
Inspect Jinja chat templates.

  analyze FILE.jinja   print the reasoning, content and tool-call markers the auto-parser
                       detects (one key: value line each; --json for one JSON object)"""
ANALYZE = "Detect a chat template's reasoning, content and tool-call markers."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The actions of ``ocm-gateway template`` (on ``parser``, from the CLI's tree)."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    analyze_ = sub.add_parser("analyze", help="print what the auto-parser detects in a template",
                              description=ANALYZE)
    analyze_.add_argument("file", type=Path, help="a Jinja chat template")
    analyze_.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    analyze_.add_argument("--all", action="store_true", help="also print empty markers")


def normalize(argv: list[str]) -> list[str]:
    """``analyze`` may be left out: ``template FILE`` means ``template analyze FILE``."""
    return argv if argv[:1] and argv[0] in ("analyze", "-h", "--help") else ["analyze", *argv]


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ocm-gateway template", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return execute(parser.parse_args(normalize(argv)))


def execute(args: argparse.Namespace) -> int:
    """Run the parsed ``template analyze`` command; the exit status."""
    try:
        source = args.file.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    summary = analyze(source).describe()
    if args.json:
        print(json.dumps(summary, ensure_ascii=False, indent=2))
        return 0
    for key, value in summary.items():
        if not args.all and value in ("", False):
            continue
        shown = value if isinstance(value, bool) or key in ("caps", "workarounds") or str(value).isupper() \
            else json.dumps(value, ensure_ascii=False)
        print(f"{key}: {shown}")
    return 0
