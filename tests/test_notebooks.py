"""The notebooks in experiments/notebooks run from top to bottom (at their smoke budget) and deliver."""

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "experiments" / "notebooks"


def execute(name: str, cwd: Path, monkeypatch) -> nbformat.NotebookNode:
    """Run a notebook on the `python3` kernel with its working directory in `cwd`; raises on a failing cell."""
    monkeypatch.setenv("JAXRL_FAST_NOTEBOOK_SMOKE", "1")  # the kernel inherits this process's environment
    # `import envpool` sets MPLBACKEND=Agg in os.environ (for its Jumanji viewers); a kernel started with it
    # would draw no inline figures, so let ipykernel choose its inline backend as in a fresh Jupyter.
    monkeypatch.delenv("MPLBACKEND", raising=False)
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}}).execute()
    return notebook


def printed(notebook) -> str:
    return "".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for output in cell.outputs if output.output_type == "stream")


def images(notebook) -> int:
    return sum("image/png" in output.get("data", {}) for cell in notebook.cells if cell.cell_type == "code"
               for output in cell.outputs)


def test_notebooks_are_stored_without_outputs():
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        assert all(not cell.get("outputs") and cell.get("execution_count") is None
                   for cell in notebook.cells if cell.cell_type == "code"), path.name


@pytest.mark.slow
def test_quickstart_trains_plots_and_plays_the_saved_policy(tmp_path, monkeypatch):
    notebook = execute("quickstart.ipynb", tmp_path, monkeypatch)
    run_dir = tmp_path / "runs" / "quickstart"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 4096 and summary["final_eval_return_mean"] is not None
    assert (run_dir / "learning_curve.png").exists()
    text = printed(notebook)
    assert "episode return: " in text and "policy from the checkpoint at step 4,096" in text
    assert images(notebook) == 1  # the learning curve


@pytest.mark.slow
def test_offpolicy_split_puts_actor_and_critic_on_two_devices(tmp_path, monkeypatch):
    notebook = execute("offpolicy_split.ipynb", tmp_path, monkeypatch)
    run_dir = tmp_path / "runs" / "offpolicy_split"
    placement = json.loads((run_dir / "config.json").read_text())["placement"]
    assert placement["mode"] == "split" and (placement["actor"], placement["critic"]) == ("cpu:0", "cpu:1")
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 2048
    text = printed(notebook)
    assert "CpuDevice(id=1)" in text and "critic: cpu:1" in text
    assert images(notebook) == 1
