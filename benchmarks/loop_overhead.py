"""What our Lightning training loop adds per step over a bare PyTorch loop, on the same batches.

    python benchmarks/loop_overhead.py [--steps 300] [--device cpu]

Both loops train the same tiny model (1+1 layers, d_model 16: the step's own compute is small,
so the loop's cost dominates) with the same label-smoothed loss, fused Adam and schedule, on the
same pre-collated batches of the demo corpus (no loader in either). The bare loop is forward,
loss, backward, optimizer and schedule steps. The Lightning loop is ``scripts/train.py``'s own:
``transformer_mt.train.build_trainer`` (our callbacks, CSV logging every 25 steps, no checkpoint
writes, no progress bar) around ``TranslationModule``. The figure is the median over windows of 25
steps, timed after a warm-up, alternating the two loops three times.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from machine import describe  # benchmarks/machine.py
from omegaconf import OmegaConf

from transformer_mt.config import register_configs
from transformer_mt.datamodule import TranslationDataModule
from transformer_mt.lit_module import TranslationModule
from transformer_mt.loss import label_smoothed_nll
from transformer_mt.optim import build_optimizer
from transformer_mt.train import build_trainer

CONF = Path(__file__).resolve().parents[1] / "conf"
WINDOW = 25


def config(out: Path, steps: int):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            "train",
            overrides=[
                f"output_dir={out}",
                f"data.cache_dir={out / 'cache'}",
                "data.train_size=4000",
                "data.vocab_size=300",
                "data.max_tokens=512",
                *("model.n_layers=1", "model.d_model=16", "model.d_ff=32", "model.n_heads=2"),
                f"trainer.max_steps={steps}",
                "trainer.max_epochs=null",
                "trainer.limit_val_batches=0",
                "trainer.enable_progress_bar=false",
                "trainer.loggers=[csv]",
                "checkpoint.every_steps=1000000",
            ],
        )


class Clock(L.Callback):
    """Wall time of every window of WINDOW steps."""

    def __init__(self) -> None:
        self.marks: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx % WINDOW == 0:
            self.marks.append(time.perf_counter())


def lightning_ms(cfg, batches, device: str, out: Path) -> list[float]:
    """Per-step milliseconds of each window of the Lightning loop (the first window dropped)."""
    module = TranslationModule.from_configs(
        replace(OmegaConf.to_object(cfg.model), vocab_size=cfg.data.vocab_size),
        OmegaConf.to_object(cfg.optim),
        OmegaConf.to_object(cfg.decode),
    )
    trainer = build_trainer(cfg, out)
    clock = Clock()
    trainer.callbacks.append(clock)
    loader = torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False)
    torch.manual_seed(0)
    trainer.fit(module, train_dataloaders=loader)
    gaps = [(b - a) * 1000 / WINDOW for a, b in zip(clock.marks, clock.marks[1:])]
    return gaps[1:]


def bare_ms(cfg, batches, device: str) -> list[float]:
    """The same model, loss, optimizer and schedule in a plain loop."""
    module = TranslationModule.from_configs(
        replace(OmegaConf.to_object(cfg.model), vocab_size=cfg.data.vocab_size),
        OmegaConf.to_object(cfg.optim),
        OmegaConf.to_object(cfg.decode),
    )
    model = module.model.to(device).train()
    optimizer, schedule = build_optimizer(
        model.parameters(), module.optim_cfg, module.model_cfg.d_model, fused=True
    )
    marks = []
    for i, batch in enumerate(batches):
        if i % WINDOW == 0:
            marks.append(time.perf_counter())
        src, tgt_in, tgt_out = (t.to(device) for t in (batch.src, batch.tgt_in, batch.tgt_out))
        loss, _ = label_smoothed_nll(model(src, tgt_in), tgt_out, 0.1)
        (loss / batch.n_tgt_tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
    if device == "cuda":
        torch.cuda.synchronize()
    marks.append(time.perf_counter())
    gaps = [(b - a) * 1000 / WINDOW for a, b in zip(marks, marks[1:])]
    return gaps[1:]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(describe())
    torch.set_num_threads(2 if args.device == "cpu" else torch.get_num_threads())
    out = Path(tempfile.mkdtemp(prefix="tmt_loop_"))
    cfg = config(out, args.steps)
    data = TranslationDataModule(OmegaConf.to_object(cfg.data), seed=cfg.seed)
    data.setup("fit")
    batches = list(data._loader("train", shuffle=True))
    while len(batches) < args.steps:
        batches += batches
    batches = batches[: args.steps]
    if args.device != "cpu":
        cfg.trainer.accelerator = "gpu"
    bare, ours = [], []
    for _ in range(args.rounds):  # alternated, so machine noise hits both alike
        bare += bare_ms(cfg, batches, args.device)
        ours += lightning_ms(cfg, batches, args.device, out)
    b, o = statistics.median(bare), statistics.median(ours)
    n_tokens = statistics.mean(batch.n_tgt_tokens for batch in batches)
    print(
        f"{len(batches)} steps x {args.rounds} rounds of a 1+1-layer d_model 16 model, "
        f"~{n_tokens:.0f} target tokens a batch, {args.device}"
    )
    print(f"bare PyTorch loop      {b:7.2f} ms/step (median of {len(bare)} windows of {WINDOW})")
    print(f"our Lightning loop     {o:7.2f} ms/step")
    print(f"overhead               {o - b:7.2f} ms/step ({o / b:.2f}x)")


if __name__ == "__main__":
    main()
