"""Training at scale, checked on the CPU: exact resume, atomic checkpoints, the step size, guards."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from transformer_mt.train import run

from .batches import collate
from .conftest import CONF

pytestmark = pytest.mark.slow  # training runs and subprocesses: not in the fast lane

SMALL = [
    "data.train_size=400",
    "data.valid_size=20",
    "data.test_size=10",
    "data.vocab_size=300",
    "data.max_tokens=400",  # 23 batches per epoch, so a resume can land mid-epoch
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
    "heatmaps.src=null",
    "heatmaps.valid_sentences=0",
    # an untrained model's searches run to the length limit: 8 pieces here, not |x| + 50
    "decode.max_len_a=0",
    "decode.max_len_b=8",
]


def _compose(tmp: Path, *overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[f"data.cache_dir={tmp / 'cache'}", *SMALL, *overrides])


def _losses(run_dir: Path) -> dict[int, float]:
    """train/loss by optimizer step (1-based) from the run's CSV logs (all sessions)."""
    from transformer_mt.viz.curves import read_metrics

    return {step + 1: loss for step, loss in read_metrics(run_dir)["train/loss"]}


@pytest.mark.parametrize("n", [26, 23], ids=["mid-epoch", "epoch-end"])
def test_n_steps_then_resume_then_n_steps_equals_2n_straight(tmp_path, n: int) -> None:
    """An epoch has 23 batches: step 26 is mid-epoch 1, step 23 the last batch of epoch 0."""
    run(_compose(tmp_path, f"output_dir={tmp_path / 'straight'}", f"trainer.max_steps={2 * n}"))
    first = tmp_path / "interrupted"
    run(
        _compose(
            tmp_path, f"output_dir={first}", f"trainer.max_steps={n}", f"checkpoint.every_steps={n}"
        )
    )
    ckpt = torch.load(first / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == n
    assert ckpt["data_position"] == (
        {"epoch": 1, "batches_done": 3} if n == 26 else {"epoch": 1, "batches_done": 0}
    )
    run(
        _compose(
            tmp_path,
            f"output_dir={tmp_path / 'ignored'}",
            f"resume={first}",
            f"trainer.max_steps={2 * n}",
        )
    )

    straight, resumed = _losses(tmp_path / "straight"), _losses(first)
    assert sorted(straight) == list(range(1, 2 * n + 1))
    assert sorted(resumed) == sorted(straight)  # the resumed run appended to the same log
    # Identical: same batches in the same order, same dropout masks, same Adam state and lr.
    assert [resumed[s] for s in range(1, 2 * n + 1)] == [straight[s] for s in range(1, 2 * n + 1)]


def test_a_run_that_ended_at_max_epochs_goes_on_as_if_never_stopped(tmp_path) -> None:
    first = tmp_path / "interrupted"
    run(_compose(tmp_path, f"output_dir={first}", "trainer.max_epochs=1"))  # 23 steps
    ckpt = torch.load(first / "checkpoints" / "last.ckpt", weights_only=True)
    assert (ckpt["global_step"], ckpt["data_position"]) == (23, {"epoch": 1, "batches_done": 0})
    run(
        _compose(
            tmp_path, f"output_dir={tmp_path / 'x'}", f"resume={first}", "trainer.max_steps=28"
        )
    )
    run(_compose(tmp_path, f"output_dir={tmp_path / 'straight'}", "trainer.max_steps=28"))
    steps = range(1, 29)
    assert [_losses(first)[s] for s in steps] == [_losses(tmp_path / "straight")[s] for s in steps]


def test_resume_needs_a_run_with_a_checkpoint(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no checkpoints/last.ckpt there"):
        run(_compose(tmp_path, f"output_dir={tmp_path / 'x'}", f"resume={tmp_path}"))


def test_a_crash_mid_write_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch) -> None:
    from transformer_mt.callbacks import AtomicCheckpointIO

    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1, "w": torch.ones(3)}, path)

    def crash(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="No space left"):
        io.save_checkpoint({"step": 2, "w": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["step"] == 1  # the old one, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # no temporary left


def test_tokens_per_step_sets_accumulation_and_logs_it(tmp_path) -> None:
    out = tmp_path / "run"
    metrics = run(
        _compose(
            tmp_path,
            f"output_dir={out}",
            "trainer.max_steps=3",
            "optim.tokens_per_step=1200",  # 3 micro-batches of 400 tokens per optimizer step
            "checkpoint.every_steps=1",
            "checkpoint.keep_last=2",
            "trainer.loggers=[csv,tensorboard]",
        )
    )
    assert metrics["accumulate_grad_batches"] == 3 and metrics["max_tokens_per_step"] == 1200
    assert metrics["steps"] == 3  # optimizer steps, not micro-batches
    lr = dict(_series(out, "train/lr"))
    from transformer_mt.optim import noam_lambda

    # The schedule advanced once per optimizer step (the demo's optim=short_warmup: warm-up 400,
    # half the rate).
    assert lr[2] == pytest.approx(noam_lambda(3, 32, 400, factor=0.5))
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == ["epoch=0-step=2.ckpt", "epoch=0-step=3.ckpt", "last.ckpt"]  # the last 2 kept
    assert list((out / "logs").glob("events.out.tfevents.*"))  # TensorBoard beside the CSV
    assert 0.0 <= dict(_series(out, "train/padding"))[0] < 0.5


def _series(run_dir: Path, name: str) -> list[tuple[int, float]]:
    from transformer_mt.viz.curves import read_metrics

    return read_metrics(run_dir)[name]


def _poison(monkeypatch, at_call: int) -> None:
    """Make the label-smoothed loss NaN on its ``at_call``-th training call."""
    from transformer_mt import loss as losses  # translation_loss looks it up there

    real, calls = losses.label_smoothed_nll, {"n": 0}

    def poisoned(logits, target, epsilon, *rest):
        loss, nll = real(logits, target, epsilon, *rest)
        if logits.requires_grad:
            calls["n"] += 1
            if calls["n"] == at_call:
                loss = loss * float("nan")
        return loss, nll

    monkeypatch.setattr(losses, "label_smoothed_nll", poisoned)


def test_a_nonfinite_loss_stops_naming_step_and_batch(tmp_path, monkeypatch) -> None:
    _poison(monkeypatch, at_call=3)
    with pytest.raises(
        FloatingPointError, match=r"non-finite training loss \(nan\) at step 2 .*sentences"
    ):
        run(_compose(tmp_path, f"output_dir={tmp_path / 'run'}", "trainer.max_steps=5"))


@pytest.mark.parametrize("fused", ["true", "false"], ids=["on the device", "on the host"])
def test_a_nonfinite_loss_can_be_skipped(tmp_path, monkeypatch, caplog, fused: str) -> None:
    _poison(monkeypatch, at_call=3)
    out = tmp_path / "run"
    run(
        _compose(
            tmp_path,
            f"output_dir={out}",
            "trainer.max_steps=5",
            "trainer.on_nonfinite_loss=skip",
            f"optim.fused={fused}",
        )
    )
    losses = _series(out, "train/loss")
    assert all(loss == loss for _, loss in losses)  # nothing NaN was logged or trained on
    assert _series(out, "train/skipped")[-1][1] == 1.0
    assert "step skipped (1 so far)" in caplog.text


def test_out_of_memory_message_names_the_batch_and_the_knobs() -> None:
    from types import SimpleNamespace

    from transformer_mt.config import DataConfig
    from transformer_mt.train import out_of_memory_message

    rows = [{"src_ids": [5] * 41, "tgt_ids": [6] * 44, "index": i} for i in range(96)]
    batch = collate(rows)
    message = out_of_memory_message(
        batch,
        DataConfig(name="x", cache_dir="/tmp", max_tokens=4096),
        SimpleNamespace(precision="16-mixed"),
    )
    assert "96 sentences x 41 source / 44 target tokens (4224 real target tokens)" in message
    assert "data.max_tokens=4096" in message and "optim.tokens_per_step" in message


def test_gpu_preset_resolves_mixed_precision_for_the_hardware() -> None:
    from transformer_mt.config import TrainerConfig
    from transformer_mt.train import lightning_arguments

    args = lightning_arguments(TrainerConfig(accelerator="gpu", precision="auto-mixed"))
    expected = (
        "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "16-mixed"
    )
    assert args["precision"] == expected
    assert not {"compile", "on_nonfinite_loss", "loggers"} & set(args)  # ours, not Lightning's


def test_a_multirun_sweep_writes_one_results_table(tmp_path) -> None:
    """Two jobs of a Hydra sweep (as the Table 3 rows run), one table at the end."""
    from .scripts import run_script

    sweep = tmp_path / "sweep"
    result = run_script(
        "train.py",
        "-m",
        f"data.cache_dir={tmp_path / 'cache'}",
        *SMALL,
        "trainer.max_steps=3",
        "model.n_heads=1,4",
        f"hydra.sweep.dir={sweep}",
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader(open(sweep / "results.csv")))
    assert [
        ("model.n_heads=1" in r["overrides"], "model.n_heads=4" in r["overrides"]) for r in rows
    ] == [
        (True, False),
        (False, True),
    ]
    assert all(float(r["val_ppl"]) > 1 and r["steps"] == "3" for r in rows)
    assert "| job | overrides | parameters |" in (sweep / "results.md").read_text()


def _started_train_script(*args: str):
    """``scripts/train.py ARGS`` started in a process of its own (to be killed), output nowhere."""
    import subprocess
    import sys

    from .conftest import ROOT

    command = [sys.executable, str(ROOT / "scripts" / "train.py"), *args]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_resume_on_the_command_line_after_a_kill_replays_the_losses(tmp_path) -> None:
    """As a user types it: ``scripts/train.py`` killed (SIGKILL) after its step-20 checkpoint,
    then ``scripts/train.py resume=<run>``: every step from the checkpoint on has the loss of
    the same run left alone, and the config comes from the run's config.yaml."""
    import time

    common = [f"data.cache_dir={tmp_path / 'cache'}", *SMALL, "trainer.max_steps=46"]
    killed = tmp_path / "killed"
    process = _started_train_script(*common, f"hydra.run.dir={killed}", "checkpoint.every_steps=10")
    started = time.monotonic()
    while not list((killed / "checkpoints").glob("*step=20*.ckpt")):
        assert process.poll() is None, "the run ended before its step-20 checkpoint"
        assert time.monotonic() - started < 300, "no step-20 checkpoint within 5 minutes"
        time.sleep(0.05)
    process.kill()
    process.wait()
    step = torch.load(killed / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    # killed mid-run, past step 20: last.ckpt is step 20's, or step 10's if the kill came
    # between writing the step file and last.ckpt (each written whole, by rename)
    assert step in (10, 20, 30, 40), step

    # the run left alone, beside the resumed one (the corpus is prepared and cached by now);
    # neither is killed, so both start from the suite's warm fork server (tests/scripts.py)
    from concurrent.futures import ThreadPoolExecutor

    from .scripts import run_script

    with ThreadPoolExecutor(max_workers=2) as pool:
        straight = pool.submit(
            run_script, "train.py", *common, f"hydra.run.dir={tmp_path / 'straight'}", timeout=600
        )
        # no other key: all from its config.yaml
        resumed = pool.submit(run_script, "train.py", f"resume={killed}", timeout=600)
        straight, resumed = straight.result(), resumed.result()
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert torch.load(killed / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 46
    expected, got = _losses(tmp_path / "straight"), _losses(killed)
    assert sorted(expected) == list(range(1, 47))
    after = list(range(step + 1, 47))  # the resumed session's steps, all logged
    assert [got[s] for s in after] == [expected[s] for s in after]
    # what the killed session had flushed before the kill agrees as well
    assert all(got[s] == expected[s] for s in range(1, step + 1) if s in got)
