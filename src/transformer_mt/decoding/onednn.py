"""fp32 matrix products through oneDNN on CPUs, for compiled decoding (``decode.compile=true``).

PyTorch's CPU build sends ``F.linear`` in fp32 to MKL's GEMM, and on AMD processors MKL takes a
slower code path: on the 2-core AMD EPYC where this was written, a (400 x 512) x (512 x 2048)
product ran at about 155 GFLOP/s through MKL and 365 through oneDNN, which PyTorch ships too
(``torch.ops.mkldnn._linear_pointwise``, the kernel Inductor itself emits for frozen weights).
A decoding step of a base model is mostly such products, so the compiled step routes every
``F.linear`` (and so every ``nn.Linear``) of an fp32 CPU tensor through oneDNN while it runs:

    with onednn_linears(device):
        logits = model.decode_step(...)

The route is a ``TorchFunctionMode`` that torch.compile traces, around an opaque custom op (the
weights are read as they are, never packed or copied, so a model that trains on keeps decoding
with its current weights). Inference only: the op has no backward. On GPUs, on other dtypes and
where PyTorch was built without oneDNN, ``onednn_linears`` does nothing.
``benchmarks/decode.py`` prints the eager step with this route as its own row, so what the route
gains and what compiling gains are read apart.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode


class PackedWeights:
    """oneDNN's blocked copies of one model's weight matrices, made on first use.

    A packed weight multiplies 10-60% faster than the plain one (measured for a decoding step's
    shapes), at the cost of a second copy of the weights. Keys are (address, shape), which stay
    unique while the model lives (a weight's row slice, e.g. cross-attention's query rows, is a
    key of its own); ``refresh`` drops every copy once any parameter changed in place (a model
    that trains on). Consulted only while ``packed_weights(table)`` is active.
    """

    def __init__(self) -> None:
        self.packed: dict[tuple, Tensor] = {}
        self.versions: tuple[int, ...] = ()

    def refresh(self, model: torch.nn.Module) -> None:
        versions = tuple(p._version for p in model.parameters())
        if versions != self.versions:
            self.packed.clear()
            self.versions = versions

    def get(self, weight: Tensor) -> Tensor:
        key = (weight.data_ptr(), tuple(weight.shape))
        packed = self.packed.get(key)
        if packed is None:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), None)
            self.packed[key] = packed
        return packed


_ACTIVE: list[PackedWeights] = []


@contextlib.contextmanager
def packed_weights(table: PackedWeights):
    """Let ``onednn_linear`` use ``table``'s packed weights (around a compiled step's call)."""
    _ACTIVE.append(table)
    try:
        yield
    finally:
        _ACTIVE.pop()


@torch.library.custom_op("transformer_mt::onednn_linear", mutates_args=())
def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (..., in) · weightᵀ (in, out) + bias, by oneDNN's fp32 GEMM (packed weights when a
    ``packed_weights`` table is active)."""
    if _ACTIVE:
        weight = _ACTIVE[-1].get(weight)
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


@onednn_linear.register_fake
def _(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return x.new_empty(*x.shape[:-1], weight.size(0))


class OneDNNLinears(TorchFunctionMode):
    """Routes ``F.linear`` of fp32 CPU tensors to ``onednn_linear``; everything else untouched."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, weight = args[0], args[1]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32:
                return onednn_linear(x, weight, bias)
        return func(*args, **kwargs)


# Read once: inside a compiled function the call would split the graph (dynamo skips torch.backends).
AVAILABLE = torch.backends.mkldnn.is_available()


def onednn_linears(device: torch.device) -> contextlib.AbstractContextManager:
    """``OneDNNLinears()`` on a CPU whose PyTorch has oneDNN; a no-op context elsewhere."""
    if device.type == "cpu" and AVAILABLE:
        return OneDNNLinears()
    return contextlib.nullcontext()
