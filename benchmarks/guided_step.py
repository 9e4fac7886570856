"""What guided alignment costs a training step: plain, guided (as predicted, shifted), full context.

    python benchmarks/guided_step.py                   # the small model of experiment=anki_es_en_cpu
    python benchmarks/guided_step.py --layers 6 --d-model 512 --heads 8 --d-ff 2048 --vocab 32000

A step is forward, label-smoothed loss (ε 0.1), backward and Adam on a batch of ``--batch``
sentences x ``--length`` pieces on each side, the same random batch for the three variants:
- plain: ``Transformer.forward``;
- guided: ``forward_with_head`` (one head's weights computed beside the fused kernel) and the
  alignment loss (λ 0.5) on one link per target piece, as ``align.guided=true`` trains;
- guided, shift: the same, each piece supervised at the row where it is the input
  (``align.mode=shift``);
- full context: the same with ``align.mode=full`` (a second, unmasked decoder pass up
  to the supervised layer, ``Decoder.head_weights``).
Steps rotate through the variants, so machine noise hits them alike; ratios are of medians.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from machine import describe  # benchmarks/machine.py

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.loss import alignment_loss, label_smoothed_nll

VARIANTS = ("plain", "guided", "guided, shift", "full context")


def make_batch(args: argparse.Namespace, generator: torch.Generator):
    """Random ids (no padding), and one link per target piece but the last (EOS's place, never
    linked) to a random source piece."""
    B, L = args.batch, args.length
    src = torch.randint(4, args.vocab, (B, L), generator=generator)
    tgt = torch.randint(4, args.vocab, (B, L + 1), generator=generator)
    linked = torch.randint(0, L, (B, L - 1), generator=generator)  # source piece per row
    rows = torch.arange(L - 1).expand(B, L - 1)
    batch_ids = torch.arange(B)[:, None].expand(B, L - 1)
    index = torch.stack([batch_ids.flatten(), rows.flatten(), linked.flatten()], dim=1)  # (N, 3)
    return src, tgt[:, :-1], tgt[:, 1:], index, torch.ones(B * (L - 1)), B * (L - 1)


def step(model, optimizer, batch, variant: str, layer: int) -> None:
    src, tgt_in, tgt_out, index, weight, n_rows = batch
    if variant == "plain":
        logits = model(src, tgt_in)
        align = 0.0
    else:
        full = variant == "full context"
        logits, weights = model.forward_with_head(src, tgt_in, layer, 0, full_context=full)
        align = alignment_loss(weights, index, weight, n_rows, shift=variant == "guided, shift")
    loss, _ = label_smoothed_nll(logits, tgt_out, 0.1)
    total = loss / tgt_out.numel() + 0.5 * align
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--d-ff", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument(
        "--batch", type=int, default=160, help="sentences (160 x 25 ≈ 4,096 tokens)"
    )
    parser.add_argument("--length", type=int, default=25)
    parser.add_argument("--align-layer", type=int, default=-2, help="supervised layer (1-based)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = TransformerConfig(
        n_layers=args.layers,
        d_model=args.d_model,
        d_ff=args.d_ff,
        n_heads=args.heads,
        vocab_size=args.vocab,
    )
    model = Transformer(cfg).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    batch = make_batch(args, torch.Generator().manual_seed(0))
    layer = args.align_layer - 1 if args.align_layer > 0 else args.layers + args.align_layer
    print(describe())
    print(
        f"model: {args.layers}+{args.layers} layers, d_model {args.d_model}, d_ff {args.d_ff}, "
        f"{args.heads} heads, vocab {args.vocab}; batch {args.batch} x {args.length} pieces; "
        f"supervised layer {layer + 1}; {args.threads} threads"
    )
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for n in range(args.warmup + args.steps):
        for variant in VARIANTS:
            started = time.perf_counter()
            step(model, optimizer, batch, variant, layer)
            if n >= args.warmup:
                times[variant].append(time.perf_counter() - started)
    plain = statistics.median(times["plain"])
    tokens = args.batch * args.length
    for variant in VARIANTS:
        median = statistics.median(times[variant])
        print(
            f"{variant:<14} {median * 1000:8.1f} ms/step  {tokens / median:8,.0f} target tokens/s"
            f"  {median / plain:.3f}x the plain step's time"
        )


if __name__ == "__main__":
    main()
