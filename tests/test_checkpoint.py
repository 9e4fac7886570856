"""Checkpoint averaging on hand-built checkpoints, and refusing what does not match."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transformer_mt.checkpoint import (
    average_checkpoints,
    checkpoint_sources,
    last_checkpoints,
    resolve_checkpoint,
)
from transformer_mt.config import checkpoint_tag
from transformer_mt.errors import UserError

MODEL = {"d_model": 4, "n_layers": 1, "vocab_size": 10}


def _save(
    path: Path, weight: list[float], steps: int = 0, model: dict | None = None, shape=(2,)
) -> Path:
    state = {
        "model.w": torch.tensor(weight).reshape(shape),
        "model.count": torch.tensor([steps, 7]),
    }
    torch.save({"state_dict": state, "hyper_parameters": {"model": model or MODEL}}, path)
    return path


def test_average_is_the_elementwise_mean(tmp_path: Path) -> None:
    paths = [_save(tmp_path / f"{i}.ckpt", [float(i), 10.0 * i]) for i in (1, 2, 6)]
    for p in paths:  # make the integer buffer equal across them
        ckpt = torch.load(p)
        ckpt["state_dict"]["model.count"] = torch.tensor([5, 7])
        torch.save(ckpt, p)
    avg = average_checkpoints(paths)
    torch.testing.assert_close(avg["state_dict"]["model.w"], torch.tensor([3.0, 30.0]))
    assert avg["state_dict"]["model.w"].dtype == torch.float32
    assert avg["state_dict"]["model.count"].tolist() == [5, 7]
    assert avg["hyper_parameters"]["model"] == MODEL and len(avg["averaged_from"]) == 3


def test_average_of_one_is_itself(tmp_path: Path) -> None:
    path = _save(tmp_path / "a.ckpt", [0.1, 0.2])
    torch.testing.assert_close(
        average_checkpoints([path])["state_dict"]["model.w"], torch.tensor([0.1, 0.2])
    )


def test_different_model_shapes_are_refused_naming_the_difference(tmp_path: Path) -> None:
    a = _save(tmp_path / "a.ckpt", [1.0, 2.0])
    b = _save(tmp_path / "b.ckpt", [1.0, 2.0, 3.0, 4.0], model={**MODEL, "d_model": 8}, shape=(4,))
    with pytest.raises(
        ValueError,
        match=r"not the same model.*model.d_model: 4 vs 8.*model.w: shape \(2,\) vs \(4,\)",
    ):
        average_checkpoints([a, b])


def test_unequal_integer_buffers_are_refused(tmp_path: Path) -> None:
    a, b = (
        _save(tmp_path / "a.ckpt", [1.0, 2.0], steps=1),
        _save(tmp_path / "b.ckpt", [1.0, 2.0], steps=2),
    )
    with pytest.raises(ValueError, match="non-float tensor model.count differs"):
        average_checkpoints([a, b])


def _run_with_steps(run: Path, steps: tuple[int, ...]) -> Path:
    """A run folder's ``checkpoints/``: one step checkpoint per step, and ``last.ckpt``."""
    folder = run / "checkpoints"
    folder.mkdir()
    for step in steps:
        _save(folder / f"epoch=0-step={step}.ckpt", [0.0, 0.0])
    _save(folder / "last.ckpt", [0.0, 0.0])
    return folder


def test_last_checkpoints_are_the_latest_steps(tmp_path: Path) -> None:
    _run_with_steps(tmp_path, (100, 2000, 300, 40))
    assert [p.name for p in last_checkpoints(tmp_path, 2)] == [
        "epoch=0-step=300.ckpt",
        "epoch=0-step=2000.ckpt",
    ]
    with pytest.raises(FileNotFoundError, match="has 4 step checkpoints, fewer than the 5"):
        last_checkpoints(tmp_path, 5)


def test_the_last_checkpoints_end_at_the_run_s_end(tmp_path: Path) -> None:
    # training stopped (max_time) at step 2469, 69 steps after its last step checkpoint
    folder = _run_with_steps(tmp_path, (2200, 2300, 2400))
    torch.save({**torch.load(folder / "last.ckpt"), "global_step": 2469}, folder / "last.ckpt")
    names = lambda paths: [p.name for p in paths]  # noqa: E731
    assert names(last_checkpoints(tmp_path, 2)) == ["epoch=0-step=2400.ckpt", "last.ckpt"]
    assert names(checkpoint_sources(folder / "last.ckpt", 3)) == [
        "epoch=0-step=2300.ckpt",
        "epoch=0-step=2400.ckpt",
        "last.ckpt",
    ]
    # from a step checkpoint: the ones that end there, never the later end
    assert names(last_checkpoints(tmp_path, 2, up_to_step=2400))[-1] == "epoch=0-step=2400.ckpt"
    # last.ckpt written beside the newest step checkpoint, at its step: counted once
    torch.save({**torch.load(folder / "last.ckpt"), "global_step": 2400}, folder / "last.ckpt")
    assert names(last_checkpoints(tmp_path, 2)) == [
        "epoch=0-step=2300.ckpt",
        "epoch=0-step=2400.ckpt",
    ]


def test_averaging_from_a_step_checkpoint_ends_at_it(tmp_path: Path) -> None:
    folder = _run_with_steps(tmp_path, (100, 200, 300, 400))
    names = lambda paths: [p.name for p in paths]  # noqa: E731
    # the two that end at step 300, not the run's last two (400 was written after it)
    assert names(checkpoint_sources(folder / "epoch=0-step=300.ckpt", 2)) == [
        "epoch=0-step=200.ckpt",
        "epoch=0-step=300.ckpt",
    ]
    for end in (tmp_path, folder / "last.ckpt"):  # the run, or its last.ckpt: the run's end
        assert names(checkpoint_sources(end, 2)) == [
            "epoch=0-step=300.ckpt",
            "epoch=0-step=400.ckpt",
        ]
    assert names(checkpoint_sources(folder / "epoch=0-step=200.ckpt", 1)) == [
        "epoch=0-step=200.ckpt"
    ]
    assert names(checkpoint_sources(tmp_path, 1)) == ["last.ckpt"]
    with pytest.raises(
        FileNotFoundError, match="has 2 step checkpoints up to step 200, fewer than the 3"
    ):
        checkpoint_sources(folder / "epoch=0-step=200.ckpt", 3)
    _save(folder / "best.ckpt", [0.0, 0.0])  # no step in its name: nothing to end at
    with pytest.raises(
        UserError, match=r"best.ckpt: its name carries no step .* ckpt.average_last=1"
    ):
        checkpoint_sources(folder / "best.ckpt", 2)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        checkpoint_sources(folder / "epoch=0-step=500.ckpt", 2)


def test_evaluate_folder_names_the_checkpoint(tmp_path: Path) -> None:
    # evaluate.py's output folder: two checkpoints of a run never share (and overwrite) one
    assert checkpoint_tag(None) == "" and checkpoint_tag(str(tmp_path)) == ""
    assert checkpoint_tag("run/checkpoints/last.ckpt") == ""
    assert checkpoint_tag("run/checkpoints/epoch=2-step=800.ckpt") == "_step800"
    assert checkpoint_tag("run/checkpoints/best.ckpt") == "_best"


def test_missing_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="pass a run directory written by scripts/train.py"):
        resolve_checkpoint(tmp_path)


@pytest.mark.slow  # a subprocess
def test_average_checkpoints_cli_writes_a_loadable_average(tmp_path: Path) -> None:
    from .scripts import run_script

    a, b = _save(tmp_path / "a.ckpt", [1.0, 3.0]), _save(tmp_path / "b.ckpt", [3.0, 5.0])
    out = tmp_path / "avg.ckpt"
    result = run_script("average_checkpoints.py", a, b, "--out", out, timeout=60)
    assert result.returncode == 0, result.stderr
    torch.testing.assert_close(torch.load(out)["state_dict"]["model.w"], torch.tensor([2.0, 4.0]))


def test_a_checkpoint_written_with_model_pad_id_still_loads() -> None:
    """``model.pad_id`` was removed (always 0, the ``vocab.PAD_ID`` everything shares): a
    checkpoint's saved model config that has it builds the same model; another value is refused."""
    from transformer_mt.errors import UserError
    from transformer_mt.model.config import TransformerConfig

    saved = {"name": "tiny", "n_layers": 1, "d_model": 8, "d_ff": 16, "n_heads": 2, "pad_id": 0}
    assert TransformerConfig.from_saved(saved) == TransformerConfig(
        name="tiny", n_layers=1, d_model=8, d_ff=16, n_heads=2
    )
    with pytest.raises(UserError, match="pads with an id other than 0"):
        TransformerConfig.from_saved({**saved, "pad_id": 3})
