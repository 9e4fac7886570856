"""Speed of one full training step against ``torch.nn.Transformer``, and model FLOPs utilisation.

    python benchmarks/train_step.py                     # CPU, 2 threads, base shape (the README figure)
    python benchmarks/train_step.py --device cuda --dtype bf16 --shapes base big --batch 256
    python benchmarks/train_step.py --with-compiled     # eager and compiled (trainer.compile) steps

A step is forward, label-smoothed loss (ε 0.1), backward and Adam(0.9, 0.98, 1e-9) on a batch of
``--batch`` sentences x ``--length`` tokens on each side, a tied ``--vocab``-token embedding and
dropout 0.1 on the residual branches and the embeddings. The baseline is ``torch.nn.Transformer``
with the same shape, batch, embeddings (token · √d + sinusoidal positions, tied output), loss and
optimizer (Adam with the same settings, in PyTorch's default implementation for the device; ours
uses its default, the fused kernel, and ``--levers`` shows the difference); its attention-weight
and FFN-inner dropout are set to 0, as ours has none there (§5.4).
Steps alternate between the two models, so machine noise hits both alike; the ratio is of medians.

MFU = achieved FLOP/s / the machine's matmul FLOP/s, both measured in this run. Model FLOPs are
counted analytically (matmuls only: projections, attention scores and sums, FFN, output layer),
times 3 for forward + backward.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from machine import describe  # benchmarks/machine.py
from torch import nn

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.config import OptimConfig
from transformer_mt.loss import label_smoothed_nll, translation_loss
from transformer_mt.model.embeddings import SinusoidalPositionalEncoding
from transformer_mt.optim import build_optimizer

SHAPES = {
    "base": dict(n_layers=6, d_model=512, d_ff=2048, n_heads=8),
    "big": dict(n_layers=6, d_model=1024, d_ff=4096, n_heads=16),
    "tiny": dict(n_layers=1, d_model=32, d_ff=64, n_heads=2),  # for the tests: seconds
}


PAPER_STEPS = {"base": 100_000, "big": 300_000}  # §5.2


class TorchTransformerMT(nn.Module):
    """``nn.Transformer`` with the paper's embeddings and a tied output layer: the baseline."""

    def __init__(
        self, vocab: int, n_layers: int, d_model: int, d_ff: int, n_heads: int, dropout: float
    ):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model, padding_idx=0)
        nn.init.normal_(self.embed.weight, std=d_model**-0.5)
        self.positions = SinusoidalPositionalEncoding(d_model, 1024)
        self.dropout = nn.Dropout(dropout)
        self.core = nn.Transformer(
            d_model, n_heads, n_layers, n_layers, d_ff, dropout, batch_first=True
        )
        for layer in [*self.core.encoder.layers, *self.core.decoder.layers]:
            layer.dropout.p = 0.0  # FFN inner dropout: the paper has none
            layer.self_attn.dropout = 0.0  # attention-weight dropout: none either
            if hasattr(layer, "multihead_attn"):
                layer.multihead_attn.dropout = 0.0

    def _embed(self, ids):
        return self.dropout(self.embed(ids) * math.sqrt(self.d_model) + self.positions(ids.size(1)))

    def forward(self, src, tgt_in):
        T = tgt_in.size(1)
        mask = torch.ones(T, T, dtype=torch.bool).triu(
            1
        )  # True = may not attend, as its padding masks
        h = self.core(
            self._embed(src),
            self._embed(tgt_in),
            tgt_mask=mask.to(src.device),
            src_key_padding_mask=src == 0,
            tgt_key_padding_mask=tgt_in == 0,
            memory_key_padding_mask=src == 0,
            tgt_is_causal=True,
        )
        return F.linear(h, self.embed.weight)


def train_flops(cfg: TransformerConfig, B: int, S: int, T: int) -> float:
    """Matmul FLOPs of one forward + backward (3 x forward), per the shapes."""
    d, f, L, V = cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.vocab_size
    dk = cfg.d_k or d // cfg.n_heads
    qk = cfg.n_heads * dk
    enc = L * S * (2 * d * (2 * qk + d) + 2 * d * d + 2 * S * (qk + d) + 4 * d * f)
    dec_self = T * (2 * d * (2 * qk + d) + 2 * d * d + 2 * T * (qk + d))
    dec_cross = T * (2 * d * qk + 2 * d * d + 2 * S * (qk + d)) + S * 2 * d * (qk + d)
    dec = L * (dec_self + dec_cross + T * 4 * d * f)
    out = T * 2 * d * V
    return 3.0 * B * (enc + dec + out)


def matmul_flops_per_s(
    device: str, dtype: torch.dtype, n: int | None = None, repeats: int = 5
) -> float:
    """The machine's dense matmul throughput: the best of a few n x n products.

    n defaults to 2048 on a CPU and 8192 on a GPU, where a smaller product is too short to fill
    the chip and would understate its peak (and so overstate MFU).
    """
    n = n or (8192 if device == "cuda" else 2048)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 1):
        _sync(device)
        t = time.perf_counter()
        (a @ b).sum().item()
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", nargs="+", default=["base"], choices=list(SHAPES))
    parser.add_argument("--batch", type=int, default=80)
    parser.add_argument("--length", type=int, default=25)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument(
        "--ragged",
        action="store_true",
        help="sentences of 3/5 length..length tokens, right-padded: both models then need padding masks",
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile our model")
    parser.add_argument(
        "--with-compiled",
        action="store_true",
        help="also time our step with forward and loss compiled as trainer.compile=true does "
        "(transformer_mt.loss.translation_loss through torch.compile), beside the eager one",
    )
    parser.add_argument(
        "--levers",
        action="store_true",
        help="also time our model with fused Adam, with torch.compile, and on the explicit-weights path",
    )
    parser.add_argument(
        "--paper-steps",
        type=int,
        default=None,
        help="steps of the projected paper run (default: 100k for base, 300k for big)",
    )
    args = parser.parse_args()
    print(describe())

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device, dtype = args.device, {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    peak = matmul_flops_per_s(device, dtype)
    print(
        f"device {device}, {args.dtype}, {torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"matmul peak measured here: {peak / 1e9:.1f} GFLOP/s"
    )
    B, S = args.batch, args.length
    src = torch.randint(4, args.vocab, (B, S), device=device)
    tgt = torch.randint(4, args.vocab, (B, S + 1), device=device)
    if args.ragged:
        shortest = max(1, 3 * S // 5)  # 15 for 25-token sentences
        lengths = torch.randint(shortest, S + 1, (B,), generator=torch.Generator().manual_seed(1))
        lengths[0] = S  # the batch keeps its width
        pad = torch.arange(S + 1)[None, :] >= lengths[:, None].to("cpu") + 1
        src = src.masked_fill(pad[:, :S].to(device), 0)
        tgt = tgt.masked_fill(pad.to(device), 0)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    n_tokens = int((tgt_out != 0).sum())

    for shape in args.shapes:
        cfg = TransformerConfig(
            name=shape, vocab_size=args.vocab, dropout=0.1, attention_dropout=0.0, **SHAPES[shape]
        )
        # name -> (model, forward(model) -> logits or (loss, nll), fused Adam?)
        variants: dict[str, tuple[nn.Module, object, bool]] = {}
        fused_default = device == "cuda"  # the baseline's Adam: PyTorch's default for the device

        def plain(model):
            return model(src, tgt_in)

        def explicit(model):
            return model.attention_maps(src, tgt_in)[0]

        ours = Transformer(cfg).to(device)
        if args.compile:
            ours.compile()
        variants["transformer_mt"] = (ours, plain, True)  # optim.fused=auto: fused on CPU and GPU
        if not args.no_baseline:
            baseline = TorchTransformerMT(
                args.vocab, cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.n_heads, 0.1
            ).to(device)
            variants["nn.Transformer"] = (baseline, plain, fused_default)
        if args.with_compiled:
            compiled_loss = torch.compile(translation_loss)

            def compiled_step(model, compiled_loss=compiled_loss):
                return compiled_loss(model, src, tgt_in, tgt_out, 0.1)

            variants["ours, compiled step"] = (Transformer(cfg).to(device), compiled_step, True)
        if args.levers:
            variants["ours, unfused Adam"] = (Transformer(cfg).to(device), plain, fused_default)
            compiled = Transformer(cfg).to(device)
            compiled.compile()
            variants["ours, torch.compile"] = (compiled, plain, True)
            variants["ours, explicit attn"] = (Transformer(cfg).to(device), explicit, True)
        models = {name: v[0] for name, v in variants.items()}
        forwards = {name: v[1] for name, v in variants.items()}
        optimizers = {
            name: build_optimizer(model.parameters(), OptimConfig(), cfg.d_model, fused=fused)[0]
            for name, (model, _, fused) in variants.items()
        }
        times: dict[str, list[float]] = {name: [] for name in models}

        def step(name: str, models=models, optimizers=optimizers, forwards=forwards) -> float:
            model, optimizer, forward = models[name], optimizers[name], forwards[name]
            _sync(device)
            t = time.perf_counter()
            with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
                out = forward(model)  # logits, or (loss, nll) from a compiled step
                loss = (
                    out[0] if isinstance(out, tuple) else label_smoothed_nll(out, tgt_out, 0.1)[0]
                )
            (loss / n_tokens).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            _sync(device)
            return time.perf_counter() - t

        for _ in range(args.warmup):
            for name in models:
                step(name)
        for _ in range(args.steps):
            for name in models:  # interleaved
                times[name].append(step(name))

        flops = train_flops(cfg, B, S, S)
        params = sum(p.numel() for p in ours.parameters())
        print(
            f"\n{shape}: {params / 1e6:.1f}M parameters, batch {B} x {S} tokens per side"
            f"{' (ragged, padded)' if args.ragged else ''}, {n_tokens} target tokens, vocab {args.vocab}"
        )
        print(
            f"{'model':<22} {'median s/step':>13} {'tgt tokens/s':>13} {'TFLOP/step':>10} {'MFU':>6}"
        )
        medians = {}
        for name, ts in times.items():
            med = statistics.median(ts)
            medians[name] = med
            print(
                f"{name:<22} {med:>13.3f} {n_tokens / med:>13,.0f} {flops / 1e12:>10.3f} {flops / med / peak:>6.1%}"
            )
        if "nn.Transformer" in medians:
            print(
                f"speed-up over nn.Transformer (tokens/s ratio): {medians['nn.Transformer'] / medians['transformer_mt']:.2f}x"
            )
        if device == "cuda":
            steps = args.paper_steps or PAPER_STEPS.get(shape, 100_000)
            for name in ("transformer_mt", "ours, compiled step"):
                if name not in medians:
                    continue
                hours = steps * medians[name] * (25000 / n_tokens) / 3600
                print(
                    f"projected {steps:,} steps of 25k target tokens on this one device, {name}: "
                    f"{hours:.1f} h (the paper: 12 h for base, 3.5 days for big, on 8 P100s)"
                )


if __name__ == "__main__":
    main()
