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


def run(argv: list[str]) -> int:
    if argv[:1] == ["analyze"]:
        argv = argv[1:]
    parser = argparse.ArgumentParser(prog="ocm-gateway template analyze",
                                     description="Detect a chat template's reasoning, content and "
                                                 "tool-call markers.")
    parser.add_argument("file", type=Path, help="a Jinja chat template")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--all", action="store_true", help="also print empty markers")
    args = parser.parse_args(argv)
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
