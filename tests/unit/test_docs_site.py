"""The docs site builds with `mkdocs build --strict`, and its hook keeps every link inside the
repository: files beside docs/ are brought in, links leaving the repository become text."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "packages/cli/src/rota/docsite/hooks.py"


def _build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=project, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": ""},
    )


def _project(tmp_path: Path, index: str) -> Path:
    project = tmp_path / "repo"
    (project / "docs").mkdir(parents=True)
    (project / "contracts").mkdir()
    (project / ".ci").mkdir()
    (project / "mkdocs.yml").write_text(f"site_name: t\nstrict: true\nhooks:\n  - {HOOK}\n")
    (project / "README.md").write_text("# Readme\n\nSee [the docs](docs/index.md) and "
                                       "[the contracts](contracts/README.md).\n")
    (project / "contracts/README.md").write_text("# Contracts\n\n[schema](JobSpec.json)\n")
    (project / "contracts/JobSpec.json").write_text("{}\n")
    (project / ".ci/run").write_text("#!/bin/sh\n")
    (project / "docs/index.md").write_text(index)
    return project


def test_links_beside_docs_are_brought_in_and_links_outside_become_text(tmp_path: Path) -> None:
    project = _project(tmp_path, "# Home\n\n[readme](../README.md), [design](../../DESIGN.md),"
                                 " [ci](../.ci/run).\n\n```\n[in code](../../x.md)\n```\n")
    (tmp_path / "DESIGN.md").write_text("# outside the repository\n")
    site = tmp_path / "site"
    built = _build(project, site)
    assert built.returncode == 0, built.stderr
    index = (site / "index.html").read_text()
    assert 'href="repo/"' in index
    assert ">design<" not in index and "design," in index  # text, not a link
    assert "<code>ci</code>" in index and "/.ci/run" not in index
    assert "[in code](../../x.md)" in index  # code blocks are left alone
    readme = (site / "repo/index.html").read_text()
    assert 'href="../"' in readme and 'href="contracts/"' in readme
    assert (site / "repo/contracts/JobSpec.json").is_file()


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    project = _project(tmp_path, "# Home\n\n[gone](../contracts/missing.md)\n")
    built = _build(project, tmp_path / "site")
    assert built.returncode == 1
    assert "missing.md" in built.stderr


def test_the_repository_site_builds_and_every_link_resolves_inside_it(tmp_path: Path) -> None:
    site = (tmp_path / "site").resolve()
    built = _build(ROOT, site)
    assert built.returncode == 0, built.stderr
    for page in site.rglob("*.html"):
        for href in re.findall(r'(?:href|src)="([^"#?]+)', page.read_text()):
            if re.match(r"^[a-z]+:|^//", href):
                continue
            target = (site / href.lstrip("/") if href.startswith("/") else page.parent / href).resolve()
            assert target.is_relative_to(site), (page, href)
            assert target.is_file() or (target / "index.html").is_file(), (page, href)
