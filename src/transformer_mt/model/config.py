"""The model's configuration: a plain dataclass, validated once (no Hydra, no OmegaConf here).

Hydra validates ``conf/model/*.yaml`` against this class through the schema that
``transformer_mt.config.register_configs`` registers; the model itself never sees a DictConfig.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformer_mt.errors import UserError


@dataclass
class TransformerConfig:
    """The architecture (§3) and its regularisation (§5.4); presets in ``conf/model``."""

    name: str = "custom"
    n_layers: int = 6  # N, for encoder and decoder alike
    d_model: int = 512
    d_ff: int = 2048  # inner FFN width, 2048 in base
    n_heads: int = 8  # h
    d_k: int | None = (
        None  # query/key width per head; None: d_model / h (d_v is always d_model / h)
    )
    dropout: float = 0.1  # P_drop: sub-layer outputs and embedding + position sums
    attention_dropout: float = 0.0  # on attention weights; the paper uses none
    label_smoothing: float = 0.1  # ε_ls
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN + final LayerNorm
    positional: str = "sinusoidal"  # or "learned" (Table 3 row E)
    max_positions: int = 1024
    tie_embeddings: bool = True  # encoder, decoder and pre-softmax weights share one matrix
    vocab_size: int = 0  # set from the tokenizer at build time

    @classmethod
    def from_saved(cls, saved: dict) -> TransformerConfig:
        """A checkpoint's model config, written by this or an earlier version: ``pad_id``, which
        every model had at 0 (the tokenizer, batches and loss share ``vocab.PAD_ID``), is
        dropped."""
        saved = dict(saved)
        if saved.pop("pad_id", 0) != 0:
            raise UserError("this checkpoint's model pads with an id other than 0: not ours")
        return cls(**saved)

    def __post_init__(self) -> None:
        for key in ("n_layers", "d_model", "d_ff", "n_heads", "max_positions"):
            if getattr(self, key) <= 0:
                raise UserError(f"model.{key} must be positive, got {getattr(self, key)}")
        if self.d_k is not None and self.d_k <= 0:
            raise UserError(f"model.d_k must be positive or null, got {self.d_k}")
        if self.d_model % self.n_heads:
            raise UserError(
                f"model.d_model={self.d_model} must be divisible by model.n_heads={self.n_heads}"
            )
        for key in ("dropout", "attention_dropout", "label_smoothing"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise UserError(f"model.{key} must be in [0, 1), got {getattr(self, key)}")
        if self.positional not in ("sinusoidal", "learned"):
            raise UserError(
                f"model.positional must be 'sinusoidal' or 'learned', got {self.positional!r}"
            )

    @property
    def head_dim(self) -> int:
        """d_k = d_v = d_model / h (64 in base and big)."""
        return self.d_model // self.n_heads
