"""int8 weights for decoding on CPUs (``decode.quantize=int8``, ``translate.py --quantize int8``).

Every ``nn.Linear`` of a copy of the model becomes an ``Int8Linear``: its weight rounded once to
int8 with one scale per output row (symmetric), and at every call the input rounded to uint8
over its own range (dynamic quantization), multiplied in int8 and returned in fp32, by fbgemm's
kernel (``quantized::linear_dynamic``, what ``torch.ao.quantization.quantize_dynamic`` runs).
The kernel is wrapped in an opaque custom op whose arguments are plain tensors, so that a
compiled decoding step (``decode.compile=true``) traces through it in one graph, and eager and
compiled decoding multiply the same numbers.

Embeddings, LayerNorms and attention itself stay fp32. Cross-attention reads its stacked
W^Q; W^K; W^V in two row blocks (queries from the decoder, keys and values from the encoder):
each block is quantized on its own (``Int8RowBlocks``).
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import Tensor, nn
from torch.utils.weak import WeakTensorKeyDictionary

from transformer_mt.model import Transformer

# Prepacked int8 weights (fbgemm's), made on first use from an ``Int8Linear``'s int8 weight,
# which is the key: a copied module (a new weight tensor) packs its own, and an entry goes
# with the module that owns its weight.
_PACKED: WeakTensorKeyDictionary = WeakTensorKeyDictionary()


def _prepacked(weight: Tensor, scale: Tensor, bias: Tensor | None) -> torch.ScriptObject:
    packed = _PACKED.get(weight)
    if packed is None:
        with warnings.catch_warnings():  # quantized tensors are deprecated, the kernel is not
            warnings.simplefilter("ignore")
            zeros = torch.zeros(weight.size(0), dtype=torch.long)
            q = torch._make_per_channel_quantized_tensor(weight, scale.double(), zeros, 0)
            packed = torch.ops.quantized.linear_prepack(q, bias)
        _PACKED[weight] = packed
    return packed


@torch.library.custom_op("transformer_mt::int8_linear", mutates_args=())
def int8_linear(x: Tensor, weight: Tensor, scale: Tensor, bias: Tensor | None) -> Tensor:
    """x (..., in) · (weight · scale)ᵀ + bias by fbgemm's dynamic int8 GEMM.

    ``weight``: (out, in) int8, ``scale``: (out,) fp32 (one per output row). ``x`` is rounded
    to uint8 over its own range inside the kernel; with ``reduce_range`` (7 bits), as PyTorch's
    x86 default, so that CPUs without VNNI cannot overflow their 16-bit sums.
    """
    packed = _prepacked(weight, scale, bias)
    y = torch.ops.quantized.linear_dynamic(x.reshape(-1, x.size(-1)).contiguous(), packed, True)
    return y.view(*x.shape[:-1], weight.size(0))


@int8_linear.register_fake
def _(x: Tensor, weight: Tensor, scale: Tensor, bias: Tensor | None) -> Tensor:
    return x.new_empty(*x.shape[:-1], weight.size(0))


class Int8Linear(nn.Module):
    """An ``nn.Linear`` with int8 weights (one scale per output row) and inputs quantized per call.

    ``rows``: only the output rows ``start:stop`` of ``linear`` (a block of a stacked projection).
    """

    def __init__(self, linear: nn.Linear, rows: slice = slice(None)) -> None:
        super().__init__()
        w = linear.weight.detach()[rows].float().cpu()
        self.in_features, self.out_features = w.size(1), w.size(0)
        scale = w.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / 127
        weight = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
        self.register_buffer("weight", weight)  # (out, in) int8
        self.register_buffer("scale", scale)  # (out,) fp32
        bias = linear.bias
        self.register_buffer("bias", None if bias is None else bias.detach()[rows].float().cpu())

    def forward(self, x: Tensor) -> Tensor:
        return int8_linear(x, self.weight, self.scale, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class Int8RowBlocks(nn.Module):
    """A stacked projection (cross-attention's W^Q; W^K; W^V) as int8 row blocks.

    Cross-attention multiplies the decoder state by the query rows and the encoder output by
    the key/value rows, never by the whole matrix: each block is an ``Int8Linear`` of its own
    (its own scales, its own input quantization), looked up by ``rows(start, stop)``.
    """

    def __init__(self, linear: nn.Linear, bounds: list[tuple[int, int | None]]) -> None:
        super().__init__()
        self.bounds = bounds
        self.blocks = nn.ModuleList(Int8Linear(linear, slice(a, b)) for a, b in bounds)

    def rows(self, start: int, stop: int | None) -> Int8Linear:
        return self.blocks[self.bounds.index((start, stop))]


def quantize_for_decoding(model: Transformer, quantize: str | None) -> Transformer:
    """``model`` itself (None), or a CPU copy whose ``nn.Linear`` layers are ``Int8Linear`` ("int8"),
    cross-attention's stacked projection as query and key/value blocks. The original is left
    as it is."""
    if quantize is None:
        return model
    if quantize != "int8":
        raise ValueError(f"quantize={quantize!r}: use int8 or None")
    model = copy.deepcopy(model).cpu().eval()
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is not nn.Linear:
                continue
            if full.endswith("cross_attn.qkv"):  # read as a query block and a key/value block
                bounds = [(0, module.qk_width), (module.qk_width, None)]
                setattr(module, child_name, Int8RowBlocks(child, bounds))
            else:
                setattr(module, child_name, Int8Linear(child))
    return model
