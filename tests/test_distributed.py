"""Many devices: the rows gathered across ranks, the checks before a launch, SLURM's ranks."""

from __future__ import annotations

import os
import re
import shlex

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from transformer_mt.distributed import (
    check_devices,
    gather_rows,
    refuse_several_processes,
)
from transformer_mt.errors import UserError

from .conftest import ROOT

CLUSTER = (
    "SLURM_NTASKS",
    "SLURM_JOB_NAME",
    "SLURM_STEP_NUM_TASKS",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "NODE_RANK",
    "GROUP_RANK",
    "TORCHELASTIC_RUN_ID",
    "LSB_JOBID",
)


@pytest.fixture
def restored_environ():
    """os.environ as it was after the test: Lightning's SLURMEnvironment writes MASTER_ADDR
    into it, which would send every later DDP launch of the session to that address."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def no_cluster(monkeypatch) -> None:
    for key in CLUSTER:
        monkeypatch.delenv(key, raising=False)


def test_gather_rows_on_one_process_is_the_rows_in_order() -> None:
    assert list(gather_rows({3: "c", 0: "a", 1: "b"}).items()) == [(0, "a"), (1, "b"), (3, "c")]


def _gather_on_rank(rank: int, world: int, port: int, shards: list, out) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        out.put((rank, gather_rows(shards[rank])))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # three processes
def test_gather_rows_over_three_gloo_processes_keeps_every_row_once() -> None:
    """Each rank's shard, with a padded repeat (rows 0 and 1 again on rank 2): every rank ends
    with every row once, in row order."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    shards = [{0: [5, 6], 3: [7]}, {1: [8], 4: [9, 9]}, {2: [4], 0: [5, 6], 1: [8]}]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.start_processes(_gather_on_rank, args=(3, port, shards, out), nprocs=3, start_method="spawn")
    got = dict(out.get(timeout=60) for _ in range(3))
    expected = [(0, [5, 6]), (1, [8]), (2, [4]), (3, [7]), (4, [9, 9])]
    assert all(list(rows.items()) == expected for rows in got.values()), got


def test_a_gpu_trainer_without_a_gpu_is_one_error_naming_the_cpu_presets(
    monkeypatch, no_cluster
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(
        UserError, match=r"trainer.accelerator=gpu .*no GPU is usable here.*trainer=cpu"
    ):
        check_devices("gpu", 1, 1)
    with pytest.raises(UserError, match="trainer=ddp_cpu"):
        check_devices("cuda", "auto", 1)


def test_more_devices_than_the_machine_has_is_one_error(monkeypatch, no_cluster) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_devices("gpu", 2, 1)
    check_devices("gpu", "auto", 1)
    check_devices("gpu", [0, 1], 1)
    for devices, wanted in ((4, 4), ("3", 3), ([0, 2], 3), ("0,5", 6)):
        with pytest.raises(
            UserError, match=rf"asks for {wanted} GPUs, but this machine has 2 GPUs"
        ):
            check_devices("gpu", devices, 1)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    check_devices("cpu", 2, 1)  # trainer=ddp_cpu
    with pytest.raises(
        UserError, match=r"trainer.devices=3 asks for 3 CPU cores, but this machine has 2"
    ):
        check_devices("cpu", 3, 1)


def test_several_nodes_need_a_cluster_environment(monkeypatch, no_cluster) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    with pytest.raises(
        UserError, match=r"trainer.num_nodes=2, but no cluster environment .*sbatch"
    ):
        check_devices("cpu", 1, 2)
    # a launch by hand, as Lightning reads it: the main node's address and this node's rank
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("NODE_RANK", "1")
    check_devices("cpu", 1, 2)
    monkeypatch.delenv("MASTER_ADDR")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_JOB_NAME", "transformer-mt")
    check_devices("cpu", 1, 2)


def test_decoding_scripts_refuse_to_run_as_several_processes(monkeypatch, no_cluster) -> None:
    refuse_several_processes("scripts/evaluate.py")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(
        UserError, match=r"decodes on one device, but it was launched as 4 processes"
    ):
        refuse_several_processes("scripts/evaluate.py")
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")
    with pytest.raises(UserError, match="python scripts/translate.py"):
        refuse_several_processes("scripts/translate.py")


def _sbatch() -> tuple[dict[str, str], list[str]]:
    """The #SBATCH options of scripts/slurm/train.sbatch and the train.py overrides its srun
    line passes (backslash continuations joined)."""
    text = (ROOT / "scripts" / "slurm" / "train.sbatch").read_text()
    options = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", text, flags=re.M))
    command = re.search(r"^srun python scripts/train.py(.*?)(?:\n(?!\s)|\Z)", text, re.M | re.S)
    args = shlex.split(command.group(1).replace("\\\n", " "))
    return options, args


def test_the_sbatch_file_composes_and_lightning_sees_its_ranks(
    monkeypatch, tmp_path, restored_environ
) -> None:
    """The task a SLURM job of scripts/slurm/train.sbatch gives rank 11 (node 1, GPU 3 of 8):
    its command composes, and the trainer built from it finds SLURM and that rank, with no
    launcher of ours. No GPUs here: the accelerator is turned to the CPU, nothing else."""
    from hydra import compose, initialize_config_dir

    from transformer_mt.train import build_trainer

    from .conftest import CONF

    options, args = _sbatch()
    nodes, per_node = int(options["nodes"]), int(options["ntasks-per-node"])
    assert int(options["gpus-per-node"]) == per_node  # one task per GPU
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": options["job-name"],
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NTASKS": str(nodes * per_node),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_NODELIST": "gpu[01-02]",
        "SLURM_PROCID": "11",
        "SLURM_LOCALID": "3",
        "SLURM_NODEID": "1",
        "RUN_DIR": str(tmp_path / "run"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    from lightning.pytorch.utilities import rank_zero_only

    # the Trainer makes this process rank 11 for Lightning's rank-zero guards: undone after
    monkeypatch.setattr(rank_zero_only, "rank", rank_zero_only.rank)
    overrides = [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], a) for a in args if a != "$@"]
    assert "experiment=paper_base_en_de" in overrides
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                o
                for o in overrides
                if not o.startswith("hydra.")  # Hydra's own, not the config's
            ]
            + [
                f"output_dir={env['RUN_DIR']}",
                "data.cache_dir=unused",
                "trainer.accelerator=cpu",
                "trainer.precision=32-true",
            ],
        )
    assert (cfg.trainer.num_nodes, cfg.trainer.devices) == (nodes, per_node)
    assert cfg.trainer.strategy == "ddp" and cfg.optim.tokens_per_step == 25000
    check_devices("cpu", 1, cfg.trainer.num_nodes)  # SLURM is a cluster environment
    trainer = build_trainer(cfg, tmp_path / "run")
    assert type(trainer.strategy.cluster_environment).__name__ == "SLURMEnvironment"
    assert (trainer.world_size, trainer.num_nodes) == (nodes * per_node, nodes)
    assert (trainer.global_rank, trainer.local_rank, trainer.node_rank) == (11, 3, 1)
    assert trainer.strategy.cluster_environment.main_address == "gpu01"


def _report_on_rank(rank: int, port: int, out) -> None:
    """One report of a ``StepReporter`` on this rank, after the steps ``RANK_STEPS`` gives it."""
    import time
    from types import SimpleNamespace

    from lightning.pytorch.strategies import DDPStrategy

    from transformer_mt.step_monitor import StepReporter

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        reporter = StepReporter()
        for n, (mean, nll, tokens) in enumerate(RANK_STEPS[rank]):
            reporter.monitor.add(
                torch.tensor(mean), torch.tensor(nll), tokens, step=n, batch="", padding=0.0
            )
        reporter.monitor.started = time.perf_counter() - 2.0  # the steps took 2 s on each rank
        logged = []
        logger = SimpleNamespace(log_metrics=lambda metrics, step: logged.append((step, metrics)))
        trainer = SimpleNamespace(
            global_step=2,
            current_epoch=0,
            is_global_zero=rank == 0,
            loggers=[logger],
            strategy=DDPStrategy(),  # its reduce, over the process group set up above
        )
        reporter.report(trainer)
        out.put((rank, logged, reporter.progress))
    finally:
        dist.destroy_process_group()


# per rank, its micro-batches: (loss per target token, summed NLL, target tokens)
RANK_STEPS = {0: [(2.0, 30.0, 10), (3.0, 25.0, 10)], 1: [(4.0, 100.0, 30), (1.0, 5.0, 10)]}


@pytest.mark.slow  # two processes
def test_the_training_loss_and_throughput_are_every_rank_s() -> None:
    """On two gloo processes, the logged loss is per target token of both ranks' batches, the
    perplexity exp(both ranks' NLL / their tokens), tok/s the sum of both ranks' rates; and every
    rank shows the same figures in its progress bar."""
    import math
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.start_processes(_report_on_rank, args=(port, out), nprocs=2, start_method="spawn")
    got = {rank: (logged, progress) for rank, logged, progress in (out.get(60) for _ in range(2))}
    # by hand: loss x tokens summed over both ranks' batches, over their 60 tokens
    loss = (2.0 * 10 + 3.0 * 10 + 4.0 * 30 + 1.0 * 10) / 60
    ppl = math.exp((30.0 + 25.0 + 100.0 + 5.0) / 60)
    rate = 20 / 2.0 + 40 / 2.0  # each rank's tokens over its 2 s, summed
    ((step, metrics),) = got[0][0]
    assert step == 1 and got[1][0] == []  # rank 0 writes the logs
    assert metrics["train/loss"] == pytest.approx(loss)
    assert metrics["train/ppl"] == pytest.approx(ppl)
    assert metrics["train/tok_s"] == pytest.approx(rate, rel=0.05)
    assert got[0][1] == got[1][1] == {"loss": f"{loss:.3f}", "tok/s": got[0][1]["tok/s"]}
