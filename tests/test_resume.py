"""Training at scale, checked on the CPU: exact resume, atomic checkpoints, the step size, guards."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transformer_mt.train import run

from .conftest import CONF

SMALL = [
    "data.train_size=400",
    "data.valid_size=20",
    "data.test_size=10",
    "data.vocab_size=300",
    "data.max_tokens=400",  # ~11 batches per epoch, so a resume can land mid-epoch
    "model.n_layers=1",
    "model.d_model=32",
    "model.d_ff=64",
    "model.n_heads=2",
    "model.dropout=0.3",  # dropout draws must be replayed too
    "trainer.max_epochs=null",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "trainer.deterministic=true",
    "trainer.loggers=[csv]",
    "align.src=null",
    "align.valid_sentences=0",
]


def _compose(tmp: Path, *overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[f"data.cache_dir={tmp / 'cache'}", *SMALL, *overrides])


def _losses(run_dir: Path) -> dict[int, float]:
    """train/loss by optimizer step (1-based) from the run's CSV logs (all sessions)."""
    from transformer_mt.viz.curves import read_metrics

    return {step + 1: loss for step, loss in read_metrics(run_dir)["train/loss"]}


def test_n_steps_then_resume_then_n_steps_equals_2n_straight(tmp_path) -> None:
    n = 14  # an epoch has ~11 batches: the checkpoint at step 14 is mid-epoch 1
    run(_compose(tmp_path, f"output_dir={tmp_path / 'straight'}", f"trainer.max_steps={2 * n}"))
    first = tmp_path / "interrupted"
    run(_compose(tmp_path, f"output_dir={first}", f"trainer.max_steps={n}", f"checkpoint.every_steps={n}"))
    ckpt = torch.load(first / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == n and 0 < ckpt["data_position"]["batches_done"]
    run(_compose(tmp_path, f"output_dir={tmp_path / 'ignored'}", f"resume={first}", f"trainer.max_steps={2 * n}"))

    straight, resumed = _losses(tmp_path / "straight"), _losses(first)
    assert sorted(straight) == list(range(1, 2 * n + 1))
    assert sorted(resumed) == sorted(straight)  # the resumed run appended to the same log
    # Identical: same batches in the same order, same dropout masks, same Adam state and lr.
    assert [resumed[s] for s in range(1, 2 * n + 1)] == [straight[s] for s in range(1, 2 * n + 1)]


def test_resume_needs_a_run_with_a_checkpoint(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no checkpoints/last.ckpt there"):
        run(_compose(tmp_path, f"output_dir={tmp_path / 'x'}", f"resume={tmp_path}"))
