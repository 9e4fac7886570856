"""Checkpoints: load a bare ``Transformer`` and its tokenizer, and average the last N (§6.1).

The paper averages the last 5 (base) or 20 (big) checkpoints, written every 10 minutes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from omegaconf import OmegaConf

from transformer_mt.config import DataConfig, TransformerConfig, checkpoint_step
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import UserError
from transformer_mt.model import Transformer
from transformer_mt.run_config import load_run_config


def run_data_config(run_dir: str | Path) -> DataConfig:
    """The data config a run was trained with, from its resolved ``config.yaml``."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"{run_dir} has no config.yaml; pass run_dir= a directory written by scripts/train.py"
        )
    return DataConfig(**OmegaConf.to_container(load_run_config(run_dir).data, resolve=True))


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or ``checkpoints/last.ckpt`` of a run directory."""
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoints" / "last.ckpt"
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint at {path}; pass a run directory written by scripts/train.py or a .ckpt file"
        )
    return path


def saved_step(path: str | Path) -> int | None:
    """The training step a checkpoint was written at (Lightning's ``global_step``), if it says."""
    # mmap: the tensors are not read, so this costs the same for a base model as for a toy
    ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    return ckpt.get("global_step")


def last_checkpoints(run_dir: str | Path, n: int, up_to_step: int | None = None) -> list[Path]:
    """The ``n`` latest checkpoints of a run, oldest first, ending at the run's end.

    The step checkpoints (``checkpoints/*step=S.ckpt``), and ``last.ckpt`` as the newest when
    training stopped between two of them (``max_time``, ``max_steps``): the weights of the
    steps after the last step checkpoint count too. With ``up_to_step``, the ``n`` latest step
    checkpoints at or before that step.
    """
    found = []
    for path in Path(run_dir, "checkpoints").glob("*.ckpt"):
        step = checkpoint_step(path)
        if step is not None and (up_to_step is None or step <= up_to_step):
            found.append((step, path))
    last = Path(run_dir, "checkpoints", "last.ckpt")
    if up_to_step is None and last.is_file():
        end = saved_step(last)
        if end is not None and end > max((step for step, _ in found), default=-1):
            found.append((end, last))
    if len(found) < n:
        upto = "" if up_to_step is None else f" up to step {up_to_step}"
        raise FileNotFoundError(
            f"{run_dir} has {len(found)} step checkpoints{upto}, fewer than the {n} to average; "
            "lower ckpt.average_last or keep more checkpoints when training"
        )
    return [path for _, path in sorted(found)[-n:]]


def checkpoint_sources(path: str | Path, average_last: int) -> list[Path]:
    """The checkpoint files that ``load_model(path, average_last=...)`` reads, oldest first.

    A run directory: its ``last.ckpt``, or its last ``average_last`` checkpoints (see
    ``last_checkpoints``: they end at ``last.ckpt``'s step). A step
    checkpoint (``...step=S.ckpt``): that file, or the ``average_last`` of its run that end at
    step S, never later ones. ``last.ckpt``: the run's end.
    """
    path = Path(path)
    if average_last <= 1:
        return [resolve_checkpoint(path)]
    if path.is_dir():
        return last_checkpoints(path, average_last)
    resolve_checkpoint(path)  # a missing file: the same message as without averaging
    if path.name == "last.ckpt":
        return last_checkpoints(path.parent.parent, average_last)
    step = checkpoint_step(path)
    if step is None:
        raise UserError(
            f"cannot average the checkpoints that end at {path}: its name carries no step "
            "(Lightning's '...step=S.ckpt'); pass the run directory or a step checkpoint, or "
            "ckpt.average_last=1 to decode this file alone"
        )
    return last_checkpoints(path.parent.parent, average_last, up_to_step=step)


def _load(path: Path, map_location: str) -> dict:
    # Our own checkpoints: plain hyper-parameter dicts next to the tensors.
    return torch.load(path, map_location=map_location, weights_only=False)


def average_checkpoints(paths: Sequence[str | Path], map_location: str = "cpu") -> dict:
    """A checkpoint whose ``state_dict`` is the element-wise mean of those in ``paths``.

    Floating-point tensors are averaged in float64 and cast back; other tensors (integer
    buffers) must be equal. Checkpoints of different model shapes are refused, naming what
    differs. The result keeps the hyper-parameters of the first and lists its sources.
    """
    if not paths:
        raise UserError("no checkpoints to average")
    first = _load(Path(paths[0]), map_location)
    sums = {k: v.double() if v.is_floating_point() else v for k, v in first["state_dict"].items()}
    for path in paths[1:]:
        ckpt = _load(Path(path), map_location)
        _check_same_model(first, ckpt, paths[0], path)
        for key, value in ckpt["state_dict"].items():
            if sums[key].is_floating_point():
                sums[key] += value.double()
            elif not torch.equal(sums[key], value):
                raise UserError(
                    f"{path}: non-float tensor {key} differs from {paths[0]}; cannot average it"
                )
    dtypes = {k: v.dtype for k, v in first["state_dict"].items()}
    state = {
        k: (v / len(paths)).to(dtypes[k]) if v.is_floating_point() else v for k, v in sums.items()
    }
    return {
        "state_dict": state,
        "hyper_parameters": first["hyper_parameters"],
        "averaged_from": [str(p) for p in paths],
    }


def _check_same_model(a: dict, b: dict, path_a: str | Path, path_b: str | Path) -> None:
    model_a, model_b = (
        a["hyper_parameters"].get("model", {}),
        b["hyper_parameters"].get("model", {}),
    )
    differ = [
        f"model.{k}: {model_a.get(k)} vs {model_b.get(k)}"
        for k in sorted(set(model_a) | set(model_b))
        if model_a.get(k) != model_b.get(k) and k != "name"
    ]
    keys_a, keys_b = set(a["state_dict"]), set(b["state_dict"])
    if keys_a != keys_b:
        differ.append(f"parameters only in one: {sorted(keys_a ^ keys_b)[:5]}")
    differ += [
        f"{k}: shape {tuple(a['state_dict'][k].shape)} vs {tuple(b['state_dict'][k].shape)}"
        for k in sorted(keys_a & keys_b)
        if a["state_dict"][k].shape != b["state_dict"][k].shape
    ]
    if differ:
        raise UserError(f"{path_b} is not the same model as {path_a}: " + "; ".join(differ[:6]))


def load_model(
    path: str | Path, map_location: str = "cpu", average_last: int = 1
) -> tuple[Transformer, Tokenizer, list[Path]]:
    """The trained model (in eval mode), its tokenizer, and the checkpoint files it came from.

    Args:
        path: a run directory (its ``last.ckpt``, or its last checkpoints when averaging) or a file.
        average_last: average the parameters of the run's last N step checkpoints (§6.1); with
            a step checkpoint as ``path``, the N that end at it.

    The tokenizer is the ``tokenizer.model`` that ``train.py`` copies into the run directory.
    """
    sources = checkpoint_sources(path, average_last)
    if len(sources) > 1:
        ckpt = average_checkpoints(sources, map_location)
    else:
        ckpt = _load(sources[0], map_location)
    ckpt_path = sources[-1]
    hparams = ckpt["hyper_parameters"]
    model = Transformer(TransformerConfig.from_saved(hparams["model"]))
    state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()}
    model.load_state_dict(state)
    tokenizer = Tokenizer(ckpt_path.parent.parent / "tokenizer.model")
    if tokenizer.vocab_size != model.cfg.vocab_size:
        raise UserError(
            f"{tokenizer.path} has {tokenizer.vocab_size} pieces but the checkpoint's model has "
            f"vocab_size={model.cfg.vocab_size}; they come from different runs"
        )
    return model.eval(), tokenizer, sources
