"""The notebooks run from top to bottom (their own asserts check the worked examples)."""

from __future__ import annotations

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow  # training runs and subprocesses: not in the fast lane

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


def _execute(name: str, env: dict[str, str], monkeypatch) -> list:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any failure
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


def test_attention_from_scratch_runs_and_matches_pytorch(monkeypatch) -> None:
    outputs = _execute("01_attention_from_scratch.ipynb", {}, monkeypatch)
    text = "".join(o.get("text", "") for o in outputs)
    assert "max |numpy - torch SDPA|" in text and "d_k= 512" in text
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 3


def test_alignment_notebook_trains_a_quick_model_and_draws(monkeypatch, tmp_path) -> None:
    env = {
        "TRANSFORMER_MT_NOTEBOOK_QUICK": "1",
        "TRANSFORMER_MT_NOTEBOOK_OUT": str(tmp_path / "run"),
        "TRANSFORMER_MT_CACHE_DIR": str(tmp_path / "cache"),
        "TRANSFORMER_MT_RUN": "",
    }
    outputs = _execute("02_alignment_heatmaps.ipynb", env, monkeypatch)
    text = "".join(o.get("text", "") for o in outputs)
    assert "best layer (argmax)" in text and "entropy" in text
    assert (
        sum("image/png" in o.get("data", {}) for o in outputs) >= 3
    )  # heatmap, heads, diagnostics
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()  # it trained, not loaded
