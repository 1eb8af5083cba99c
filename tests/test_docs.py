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


def test_every_package_of_the_source_tree_is_in_the_distribution() -> None:
    """A package missing from pyproject's list works in an editable install and is absent from a
    wheel (`pip install .` once left out the five algorithms' packages: no algorithm to train)."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "jaxrl_fast").rglob("__init__.py")}
    on_disk |= {name for name, folder in setuptools["package-dir"].items() if (ROOT / folder).is_dir()}
    assert on_disk == set(setuptools["packages"]), on_disk.symmetric_difference(setuptools["packages"])


def fenced_blocks(markdown: str, section: str) -> dict[str, list[str]]:
    """The fenced code blocks of one `## section`, by language."""
    body = markdown.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, list[str]] = {}
    for language, code in re.findall(r"```(\w+)\n(.*?)```", body, flags=re.S):
        blocks.setdefault(language, []).append(code)
    return blocks


@pytest.mark.slow
def test_the_load_policy_example_runs_as_written_on_a_short_default_run(tmp_path: Path) -> None:
    """docs/checkpoints.md's commands, run as a reader would (a shorter budget), and the refusals it documents."""
    blocks = fenced_blocks((ROOT / "docs" / "checkpoints.md").read_text(encoding="utf-8"), "Loading a policy")
    (command,) = blocks["bash"]
    words = command.split()
    assert words[:3] == ["python", "-m", "jaxrl_fast.train"], command
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    train = subprocess.run([sys.executable, *words[1:], "--total-steps", "4096", "--eval-episodes", "2", "--progress", "off"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert train.returncode == 0, train.stderr[-3000:]
    (snippet,) = blocks["python"]
    (tmp_path / "snippet.py").write_text(snippet)
    play = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert play.returncode == 0, play.stderr[-3000:]
    assert "read only" not in play.stderr  # orbax's notices about a manager that only reads: nothing is wrong
    assert re.search(r"episode return \d+ with the policy of step 4,096", play.stdout), play.stdout

    import numpy as np

    import jaxrl_fast
    from jaxrl_fast.outputs.checkpoint import CheckpointError

    run_dir = tmp_path / "runs" / "cartpole"
    with pytest.raises(CheckpointError, match=r"no checkpoint at step 5000 in .*; saved steps: 4096$"):
        jaxrl_fast.load_policy(run_dir, step=5000)
    policy = jaxrl_fast.load_policy(run_dir, step=4096)
    with pytest.raises(CheckpointError, match=re.escape("observations of shape (1, 3); this policy (CartPole-v1) takes "
                                                        "one observation of shape (4,) or a batch of shape (N, 4)")):
        policy(np.zeros((1, 3)))
    assert policy(np.zeros(4)).shape == () and policy(np.zeros((2, 4))).shape == (2,)


def test_the_quick_subset_is_registered_and_documented_with_its_duration() -> None:
    import tomllib

    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(marker.startswith("slow:") for marker in markers)
    text = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    for command in ('python -m pytest -q` (the whole suite', 'python -m pytest -q -m "not slow"` (the quick subset'):
        row = next(line for line in text.splitlines() if command in line)
        assert re.search(r"\d+ min", row), row  # each with its measured duration


def test_the_api_page_is_the_functions_docstring() -> None:
    """docs/api.md shows `jaxrl_fast.train`'s and `Result`'s docstrings as they are in the code."""
    import inspect

    import jaxrl_fast

    page = (ROOT / "docs" / "api.md").read_text()
    for documented in (jaxrl_fast.train, jaxrl_fast.Result):
        assert inspect.cleandoc(documented.__doc__) in page, documented.__name__
