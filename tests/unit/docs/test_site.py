"""The documentation site (``mkdocs.yml``, ``docs/``) builds in strict mode: a broken link or
anchor, a link to a missing page, or a page left out of the navigation fails the build, and so
this test (the build is not ``--quiet``: that hides the warnings strict mode counts).  A second
build, of a copy with one broken link and one page outside the nav, must fail: the strictness
is checked, not assumed.  The README's links into the site must resolve too (they are read on
GitHub, outside MkDocs)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT


def _build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(project / "mkdocs.yml"), "-d", str(site)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = _build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for page in ("index.html", "getting-started/index.html", "api/responses/index.html",
                 "clients/codex-cli/index.html", "troubleshooting/index.html",
                 "reference/configuration/index.html", "reference/api/index.html"):
        assert (tmp_path / "site" / page).is_file(), page


def test_a_broken_link_or_a_page_outside_the_nav_fails_the_build(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    with (project / "docs" / "troubleshooting.md").open("a") as page:
        page.write("\n[gone](no-such-page.md) and [nowhere](#no-such-anchor)\n")
    (project / "docs" / "orphan.md").write_text("# Not in the nav\n")
    done = _build(project, tmp_path / "site")
    assert done.returncode != 0
    log = done.stdout + done.stderr
    assert "no-such-page.md" in log and "no-such-anchor" in log and "orphan.md" in log, log[-3000:]


def test_the_readme_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert any(t.startswith("docs/") for t in local)
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing
