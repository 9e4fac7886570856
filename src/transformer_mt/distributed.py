"""Figures that are the same on one device and on many, and the checks made before launching.

Under data parallelism every rank decodes and scores its own shard of a split (``TokenBatchSampler``
pads the shards to equal length with repeated batches). Corpus BLEU, chrF and perplexity are not
means of per-shard figures: the rows are gathered first, each row once, and every rank then
computes the figure of the whole split.

``check_devices`` turns what Lightning would report as a traceback (no GPU, too few GPUs, several
nodes with nobody to start the others) into one ``error:`` line naming the key to change.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from transformer_mt.errors import UserError

T = TypeVar("T")


def gather_rows(local: dict[int, T]) -> dict[int, T]:
    """Every rank's ``{row: value}`` merged, on every rank, in row order.

    A row that two ranks hold (a padded repeat of a batch) is kept once. One process: ``local``
    in row order.
    """
    merged = dict(local)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        parts: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(parts, local)  # pickled: works over gloo and NCCL alike
        merged = {}
        for part in parts:
            merged.update(part)
    return dict(sorted(merged.items()))


def several_processes() -> int:
    """How many processes a launcher started for this command (torchrun, srun): 1 if none did."""
    counts = [os.environ.get(k, "1") for k in ("WORLD_SIZE", "SLURM_STEP_NUM_TASKS")]
    return max(int(c) if c.isdigit() else 1 for c in counts)


def refuse_several_processes(script: str) -> None:
    """``script`` decodes on one device: launched as many processes, each would decode the whole
    split and write the same files; say so instead."""
    n = several_processes()
    if n > 1:
        raise UserError(
            f"{script} decodes on one device, but it was launched as {n} processes (torchrun or "
            f"srun set WORLD_SIZE / SLURM_STEP_NUM_TASKS): run it as one plain process, "
            f"python {script} ..."
        )


CLUSTER_VARIABLES = ("MASTER_ADDR", "NODE_RANK")  # Lightning's own multi-node launch, by hand


def check_devices(accelerator: str, devices: Any, num_nodes: int) -> None:
    """Refuse, before any work, what this machine cannot run: a GPU accelerator without a GPU,
    more devices than it has, or several nodes with no cluster environment to start them."""
    if accelerator in ("gpu", "cuda"):
        mps = accelerator == "gpu" and torch.backends.mps.is_available()
        if not torch.cuda.is_available() and not mps:
            build = (
                "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
            )
            raise UserError(
                f"trainer.accelerator={accelerator} (trainer=gpu and trainer=ddp): no GPU is "
                f"usable here (torch {torch.__version__}, {build}, torch.cuda.is_available() is "
                "False). Train on the CPU with trainer=cpu (trainer=ddp_cpu for the distributed "
                "path), or install a CUDA build of torch on a machine with a GPU"
            )
        have = torch.cuda.device_count() if torch.cuda.is_available() else 1
        _check_count(devices, have, "GPU", f"trainer.devices={devices!r}")
    elif accelerator == "cpu":
        # each CPU "device" is one training process: more processes than cores only slow it down
        _check_count(devices, os.cpu_count() or 1, "CPU core", f"trainer.devices={devices!r}")
    if num_nodes > 1 and not _cluster_environment():
        raise UserError(
            f"trainer.num_nodes={num_nodes}, but no cluster environment is set to start the other "
            "nodes' processes: submit it through SLURM (sbatch scripts/slurm/train.sbatch), launch "
            "it with torchrun --nnodes on every node, or set MASTER_ADDR, MASTER_PORT and "
            "NODE_RANK on every node (or trainer.num_nodes=1 on one machine)"
        )


def _check_count(devices: Any, have: int, unit: str, key: str) -> None:
    """``devices`` as Lightning reads it: a count, or a list (or "0,1") of device indices."""
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if isinstance(devices, str) and "," in devices:
        devices = [int(d) for d in devices.split(",") if d.strip()]
    wanted = None
    if isinstance(devices, int) and devices > 0:
        wanted = devices
    elif isinstance(devices, list | tuple) and devices:
        wanted = max(int(d) for d in devices) + 1
    if wanted is not None and wanted > have:
        plural = "s" if have != 1 else ""
        raise UserError(
            f"{key} asks for {wanted} {unit}s, but this machine has {have} {unit}{plural}: lower "
            f"trainer.devices (trainer.devices=auto takes all {have})"
        )


def _cluster_environment() -> bool:
    """Whether Lightning will find the other nodes: the environments it detects by itself
    (SLURM, torchrun, LSF, MPI), or the variables of a launch by hand."""
    from lightning.fabric.plugins.environments import (
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    detected = (SLURMEnvironment, TorchElasticEnvironment, LSFEnvironment, MPIEnvironment)
    return any(env.detect() for env in detected) or all(k in os.environ for k in CLUSTER_VARIABLES)
