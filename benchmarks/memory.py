"""Peak memory of one training step against sequence length: the fused SDPA path never stores T x T.

    python benchmarks/memory.py                          # CPU: peak resident memory, fresh process per point
    python benchmarks/memory.py --device cuda            # GPU: torch.cuda.max_memory_allocated

One step (forward, label-smoothed loss, backward) of a 2+2-layer model (d_model 256, 4 heads,
FFN 1024, vocabulary 1,000) on one sentence pair of T source and T target tokens, for T from 128
to 4096, once through the training path (PyTorch's fused ``scaled_dot_product_attention``) and
once through the explicit path that materialises the weights (``Transformer.attention_maps``,
what the alignment tools use). Each CPU point runs in a fresh process and reports the growth of
its peak resident set over the step; the explicit path must grow with T^2 (six (H, T, T) maps
and their softmax saved for backward), the fused one about linearly.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import torch
from machine import describe  # benchmarks/machine.py

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.loss import label_smoothed_nll

CFG = dict(
    n_layers=2, d_model=256, d_ff=1024, n_heads=4, vocab_size=1000, max_positions=4096, dropout=0.1
)


def one_step(length: int, path: str, device: str) -> int:
    """Peak bytes the step adds (CPU: resident set growth; CUDA: allocator peak)."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(name="memory", **CFG)).to(device)
    src = torch.randint(4, 1000, (1, length), device=device)
    tgt = torch.randint(4, 1000, (1, length + 1), device=device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if path == "sdpa":
        logits = model(src, tgt[:, :-1])
    else:
        logits, _ = model.attention_maps(src, tgt[:, :-1])
    loss, _ = label_smoothed_nll(logits, tgt[:, 1:], 0.1)
    loss.backward()
    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--point", nargs=2, help=argparse.SUPPRESS)  # internal: one measurement
    args = parser.parse_args()
    print(describe())
    torch.set_num_threads(args.threads)

    if args.point:
        print(json.dumps(one_step(int(args.point[0]), args.point[1], args.device)))
        return

    print(
        f"peak memory of one training step, {args.device}, 2+2 layers, d_model 256, 4 heads, "
        f"batch 1, T source = T target tokens"
    )
    print(f"{'T':>6} {'fused SDPA':>12} {'explicit weights':>17} {'ratio':>7}")
    if args.device == "cuda":
        # The first backward in a process allocates cuBLAS workspaces (tens of MiB), which would
        # otherwise be counted against the first point (82 MiB at T=128 in the H200 report).
        for path in ("sdpa", "explicit"):
            one_step(args.lengths[0], path, args.device)
    for length in args.lengths:
        row = {}
        for path in ("sdpa", "explicit"):
            if args.device == "cpu":  # a fresh process: ru_maxrss only ever grows
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--point",
                        str(length),
                        path,
                        "--threads",
                        str(args.threads),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                row[path] = json.loads(out.stdout.strip().splitlines()[-1])
            else:
                row[path] = one_step(length, path, args.device)
        print(
            f"{length:>6} {row['sdpa'] / 2**20:>9.0f} MiB {row['explicit'] / 2**20:>14.0f} MiB "
            f"{row['explicit'] / max(row['sdpa'], 1):>6.1f}x"
        )


if __name__ == "__main__":
    main()
