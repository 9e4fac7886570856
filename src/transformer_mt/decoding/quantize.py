"""Dynamic int8 quantization of a trained model for decoding on CPUs (``decode.quantize=int8``)."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from transformer_mt.model import Transformer


def quantize_for_decoding(model: Transformer, quantize: str | None) -> Transformer:
    """``model`` itself (None), or a copy whose ``nn.Linear`` layers compute in int8 ("int8"):
    ``torch.ao.quantization.quantize_dynamic`` (weights quantized per tensor once, activations
    at every call); embeddings, LayerNorms, attention itself and the cross-attention
    projections stay fp32. CPU only."""
    if quantize is None:
        return model
    if quantize != "int8":
        raise ValueError(f"quantize={quantize!r}: use int8 or None")
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        model = copy.deepcopy(model).cpu().eval()
        # Cross-attention reads its fused Q/K/V weight in row blocks (query apart from key/value),
        # never through the module's own call: it stays fp32, like the attention itself.
        linears = {
            name: torch.ao.quantization.default_dynamic_qconfig
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and not name.endswith("cross_attn.qkv")
        }
        return torch.ao.quantization.quantize_dynamic(model, linears, dtype=torch.qint8)
