"""What Lightning leaves to us for the paper's training: atomic checkpoints and an exact resume.

Lightning restores the model, optimizer, schedule, precision scaler, step and epoch counters.
``ExactResume`` adds what it does not: the random number generators (dropout's draws) and the
position inside the epoch, so that a run interrupted mid-epoch continues with the same batches.
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.plugins.io import TorchCheckpointIO

log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint to ``<name>.tmp``, flush it to disk, then rename it into place.

    A rename within one directory is atomic on POSIX file systems, so a crash (or a full disk)
    mid-write leaves the previous file intact instead of a truncated one.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError(
                f"{type(self).__name__} takes no storage_options, got {storage_options!r}"
            )
        fs = get_filesystem(path)
        if "file" not in fs.protocol:  # e.g. ("s3", "s3a"); local files are ("file", "local")
            super().save_checkpoint(checkpoint, path)  # remote storage: its own semantics
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def rng_states() -> dict[str, Any]:
    """Every generator's state, as tensors and plain values (loadable with weights_only=True)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    states = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _cuda_state() -> torch.Tensor | None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.get_rng_state()
    return None


def set_rng_states(states: dict[str, Any]) -> None:
    if "python" in states:
        random.setstate(states["python"])
    if "numpy" in states:
        kind, keys, pos, has_gauss, gauss = states["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(states["torch"].clone())
    if "cuda" in states and torch.cuda.is_available():
        if len(states["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states["cuda"])
        else:  # one device per process (DDP): this rank's own generator
            torch.cuda.set_rng_state(states["cuda"][0])


class ExactResume(L.Callback):
    """Save and restore RNG states and the position in the data.

    The position is (epoch, batches of it already trained): the epoch's batch order is a
    function of the seed and the epoch, so skipping those batches puts a resumed run on the
    very batch the interrupted one would have trained next. Each rank stores its own RNG
    states; the position is the same on every rank (each runs the same number of batches).
    Needs a datamodule with ``resume_at(epoch, batches_done)`` (``TranslationDataModule``).
    """

    def __init__(self) -> None:
        self.batches_done = 0  # batches trained in the current epoch
        self._rng: dict[str, Any] | None = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.batches_done = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.batches_done += 1

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        checkpoint["rng_states"] = {trainer.global_rank: rng_states()}
        if trainer.world_size > 1:
            # Every rank runs this (only rank 0 writes the file): gather each rank's torch
            # generators, which draw its dropout masks. Python's and NumPy's stay rank 0's;
            # training draws nothing from them (the sampler has its own seeded generator).
            for key, get in (("torch", torch.get_rng_state), ("cuda", _cuda_state)):
                mine = get()
                if mine is None:
                    continue
                every = trainer.strategy.all_gather(mine.to(pl_module.device)).cpu()  # (W, n)
                for rank in range(trainer.world_size):
                    states = checkpoint["rng_states"].setdefault(rank, {})
                    row = every[rank].clone()  # its own storage: set_rng_state ignores offsets
                    states[key] = row if key == "torch" else [row]
        if self.batches_done >= trainer.num_training_batches:  # the epoch is over
            position = {"epoch": trainer.current_epoch + 1, "batches_done": 0}
        else:
            position = {"epoch": trainer.current_epoch, "batches_done": self.batches_done}
        checkpoint["data_position"] = position

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        # Called before the training data loader exists, so the sampler can be positioned.
        position = checkpoint.get("data_position")
        if position is not None:
            trainer.datamodule.resume_at(position["epoch"], position["batches_done"])
            self.batches_done = position["batches_done"]
            if position["batches_done"]:
                log.info(
                    "resuming epoch %d after its first %d batches",
                    position["epoch"],
                    position["batches_done"],
                )
        self._rng = checkpoint.get("rng_states", {}).get(trainer.global_rank)
        if self._rng is None:
            log.warning(
                "the checkpoint has no RNG states for rank %d: dropout will differ",
                trainer.global_rank,
            )

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Restored last, after the data loader's iterator has drawn its own seed, exactly as
        # it had when the checkpoint was written.
        if self._rng is not None:
            set_rng_states(self._rng)
            self._rng = None


class FinalCheckpoint(L.Callback):
    """Write ``last.ckpt`` at the step where training stops, wherever the schedules fall.

    Checkpoints every N steps or minutes need not land on the last step (max_steps, max_time,
    max_epochs), and ``last.ckpt`` is what evaluation and ``resume=`` read. Saved from the same
    hooks as Lightning's own checkpoints, so a resume from it continues like one from those.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        at_max_steps = 0 < trainer.max_steps <= trainer.global_step
        # the last batch of the last epoch, saved here and not at the epoch's end: a run
        # resumed from a checkpoint written in on_train_epoch_end (to go on with a higher
        # max_epochs or max_steps) did not train the batches the uninterrupted run trained
        limit = trainer.max_epochs
        at_max_epochs = (
            limit is not None
            and 0 < limit <= trainer.current_epoch + 1
            and batch_idx + 1 >= trainer.num_training_batches
        )
        if at_max_steps or at_max_epochs or trainer.should_stop:
            trainer.save_checkpoint(self.path)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.should_stop:  # set after the epoch's last batch (e.g. by early stopping)
            trainer.save_checkpoint(self.path)


class StepProgressBar(TQDMProgressBar):
    """Lightning's progress bar, with the loss and target tokens/s of the last report.

    The training step logs nothing itself (see ``step_monitor.py``): the bar shows what the
    module's ``StepReporter`` read at its last report, every ``trainer.log_every_n_steps``
    steps, so refreshing it every step reads nothing from the device.
    """

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict:
        return {**super().get_metrics(trainer, pl_module), **pl_module.steps.progress}
