"""The documentation: the docs site builds strictly, and the README stays a front page with working links."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_BYTES = 12_500


def doc_files() -> list[Path]:
    return [README, ROOT / "experiments" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_docs_site_builds_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[docs]')")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # no banner in the output
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "site" / "index.html").exists()


def test_readme_is_a_front_page() -> None:
    size = README.stat().st_size
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; reference material belongs in docs/ (limit {README_MAX_BYTES})"


def test_docs_name_no_files_outside_the_repository() -> None:
    for path in doc_files():
        assert path.exists(), path
        text = path.read_text(encoding="utf-8")
        for needle in ("../shared", "shared/"):
            assert needle not in text, f"{path.relative_to(ROOT)} mentions {needle!r}, outside the repository"


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def test_readme_relative_links_exist() -> None:
    text = README.read_text(encoding="utf-8")
    targets = LINK.findall(text)
    assert targets, "README.md has no links"
    missing = []
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor in the README itself
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not (ROOT / path).exists():
            missing.append(target)
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_license_pyproject_names_is_in_the_repository() -> None:
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    assert declared == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "Copyright 2026 the jaxrl_fast authors" in text
