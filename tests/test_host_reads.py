"""The training step reads nothing from the device: host reads happen once per report.

A host read of a device tensor (``.item()``, ``bool(t)``, ``.tolist()``, ``.cpu()`` ...) makes the
CPU wait for every queued kernel; at a GPU's pace that stalls every step. On the CPU nothing stalls,
but the calls can be counted: every such call between the start of a training batch and the
start of the next is counted over N steps, and at most one per report is allowed.
"""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch

from .test_resume import _compose, _poison, _series

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


class CountHostReads(L.Callback):
    """Counts Tensor reads from the first training batch's start to the end of the epoch."""

    def __init__(self, monkeypatch) -> None:
        self.counting, self.reads = False, []
        for name in READS:
            real = getattr(torch.Tensor, name)

            def counted(tensor, *args, _real=real, _name=name, **kwargs):
                if self.counting:
                    self.reads.append(_name)
                return _real(tensor, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, counted)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.counting = True

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.counting = False


@pytest.mark.slow  # trains
def test_n_steps_read_the_device_once_per_report(tmp_path, monkeypatch) -> None:
    from transformer_mt import train
    from transformer_mt.model import transformer

    # On the CPU the model drops an all-true padding mask after one bool() per stack
    # (masks.without_trivial); on a GPU that check is skipped, which is the path measured here.
    monkeypatch.setattr(transformer, "without_trivial", lambda mask: mask)
    counter = CountHostReads(monkeypatch)
    build = train.build_trainer

    def with_counter(cfg, out):
        trainer = build(cfg, out)
        trainer.callbacks.append(counter)
        return trainer

    monkeypatch.setattr(train, "build_trainer", with_counter)
    steps, every = 20, 5
    cfg = _compose(
        tmp_path,
        f"output_dir={tmp_path / 'run'}",
        f"trainer.max_steps={steps}",
        f"trainer.log_every_n_steps={every}",
        "trainer.enable_progress_bar=false",
    )
    train.run(cfg)
    assert counter.reads.count("tolist") == steps // every  # one read per report
    assert len(counter.reads) <= steps // every, counter.reads
    assert [s for s, _ in _series(tmp_path / "run", "train/loss")] == [4, 9, 14, 19]


@pytest.mark.slow  # trains
def test_a_nonfinite_step_is_skipped_on_the_device_and_reported_late(tmp_path, monkeypatch, caplog):
    """With fused Adam the guard needs no host read: the step is skipped on the device (the
    weights stay finite) and reported at the next report, naming its step and batch."""
    _poison(monkeypatch, at_call=3)
    out = tmp_path / "run"
    cfg = _compose(
        tmp_path,
        f"output_dir={out}",
        "trainer.max_steps=10",
        "trainer.log_every_n_steps=5",
        "trainer.on_nonfinite_loss=skip",
    )
    from transformer_mt.train import run

    run(cfg)
    assert "non-finite training loss (nan) at step 2 (epoch 0, batch 2" in caplog.text
    assert "step skipped (1 so far)" in caplog.text
    assert _series(out, "train/skipped") == [(4, 1.0), (9, 1.0)]
    losses = [loss for _, loss in _series(out, "train/loss")]
    assert len(losses) == 2 and all(loss == loss for loss in losses)  # the NaN step is left out
    ckpt = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert all(
        torch.isfinite(t).all() for t in ckpt["state_dict"].values() if t.is_floating_point()
    )


def test_step_monitor_sums_finite_steps_and_counts_bad_ones() -> None:
    from transformer_mt.step_monitor import StepMonitor

    monitor = StepMonitor()
    monitor.add(torch.tensor(2.0), torch.tensor(30.0), 10, step=0, batch="step 0", padding=0.1)
    monitor.add(
        torch.tensor(float("nan")), torch.tensor(1.0), 5, step=1, batch="step 1", padding=0.3
    )
    monitor.grad_norm(torch.tensor(float("inf")))  # another rank's NaN, all-reduced
    monitor.add(torch.tensor(4.0), torch.tensor(50.0), 10, step=2, batch="step 2", padding=0.2)
    monitor.grad_norm(torch.tensor(3.0))
    report = monitor.report(step=3)
    assert report.loss == pytest.approx((2.0 * 10 + 4.0 * 10) / 20)  # the NaN step left out
    assert report.ppl == pytest.approx(math.exp(80.0 / 20))
    assert (report.bad_steps, report.bad_grad_steps, report.first_bad_step) == (1, 1, 1)
    assert math.isnan(report.first_bad_loss) and report.first_bad_batch == "step 1"
    assert report.grad_norm == 3.0 and report.padding == pytest.approx(0.2)
    assert monitor.report(step=4) is None  # started over
