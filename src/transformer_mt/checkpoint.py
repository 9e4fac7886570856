"""Loading a bare ``Transformer`` (and its tokenizer) from a run directory or a Lightning checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch

from transformer_mt.config import TransformerConfig
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.model import Transformer


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


def load_model(path: str | Path, map_location: str = "cpu") -> tuple[Transformer, Tokenizer]:
    """The trained model (in eval mode) and the tokenizer of a run directory or checkpoint.

    The tokenizer is the ``tokenizer.model`` that ``train.py`` copies into the run directory.
    """
    ckpt_path = resolve_checkpoint(path)
    # Our own checkpoints: they hold plain hyper-parameter dicts next to the tensors.
    ckpt = torch.load(ckpt_path, map_location=map_location, weights_only=False)
    hparams = ckpt["hyper_parameters"]
    model = Transformer(TransformerConfig(**hparams["model"]))
    state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()}
    model.load_state_dict(state)
    tokenizer = Tokenizer(ckpt_path.parent.parent / "tokenizer.model")
    if tokenizer.vocab_size != model.cfg.vocab_size:
        raise ValueError(
            f"{tokenizer.path} has {tokenizer.vocab_size} pieces but the checkpoint's model has "
            f"vocab_size={model.cfg.vocab_size}; they come from different runs"
        )
    return model.eval(), tokenizer
