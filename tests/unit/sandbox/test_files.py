"""app.sandbox.files on a directory a hostile run left behind: links are never followed, a
FIFO never blocks, contents come back within the budget, only new or changed files count."""

from __future__ import annotations

import os
from pathlib import Path

from app.sandbox import files


def test_written_is_new_or_changed_files_within_the_budget(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"a" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"b" * 30)
    first = files.scan(tmp_path)
    assert first.names() == ["a.txt", "sub/b.bin"] and first.total == 40
    got = files.written(tmp_path, {}, first, budget=35)
    assert [(w.path, w.size, w.data) for w in got] == [("a.txt", 10, b"a" * 10), ("sub/b.bin", 30, None)]
    assert got[0].as_json() == {"path": "a.txt", "bytes": 10, "data": "YWFhYWFhYWFhYQ=="}
    assert got[1].as_json() == {"path": "sub/b.bin", "bytes": 30}  # over what was left: name and size
    (tmp_path / "c.txt").write_bytes(b"c")
    os.utime(tmp_path / "a.txt", ns=(1, 1))  # touched: changed
    assert [w.path for w in files.written(tmp_path, first.stamps, files.scan(tmp_path), 100)] == [
        "a.txt", "c.txt"]


def test_links_fifos_and_big_files_are_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("top secret")
    root = tmp_path / "c"
    root.mkdir()
    (root / "link.png").symlink_to(secret)
    (root / "dir").symlink_to(tmp_path)  # a link to a directory is not walked
    os.mkfifo(root / "pipe")
    (root / "big").write_bytes(b"x" * (files.MAX_FILE + 1))
    scan = files.scan(root)
    assert scan.names() == ["big"]
    assert [w.as_json() for w in files.written(root, {}, scan, 10 * files.MAX_FILE)] == [
        {"path": "big", "bytes": files.MAX_FILE + 1}]


def test_a_file_swapped_for_a_link_after_the_scan_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("top secret")
    root = tmp_path / "c"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f.txt").write_text("mine")
    scan = files.scan(root)
    (root / "d" / "f.txt").unlink()
    (root / "d" / "f.txt").symlink_to(secret)
    assert [w.data for w in files.written(root, {}, scan, 1000)] == [None]
    (root / "d" / "f.txt").unlink()
    (root / "d").rmdir()
    (root / "d").symlink_to(tmp_path)  # a directory on the way swapped for a link
    assert [w.data for w in files.written(root, {}, scan, 1000)] == [None]


def test_at_most_max_written_files_are_reported(tmp_path: Path) -> None:
    for n in range(files.MAX_WRITTEN + 5):
        (tmp_path / f"f{n:02}").write_text(str(n))
    assert len(files.written(tmp_path, {}, files.scan(tmp_path), 10_000)) == files.MAX_WRITTEN
