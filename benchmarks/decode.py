"""Cached against uncached decoding: sentences/s of greedy and beam-4 search, and their ratios.

    python benchmarks/decode.py [--sentences 100] [--length 25] [--vocab 8000] [--threads 2]

A base-shape model (6+6 layers, d_model 512, FFN 2048, 8 heads) with random weights decodes
one batch of source sentences of ``--length`` tokens; every output is forced to exactly
``--length`` tokens (EOS is masked until then, then forced), so both decoders do the same work
apart from what the cache saves. The uncached decoder re-runs the model's decoder forward over
the whole prefix at every step (``use_cache=False``: self- and cross-attention K/V and the logits
of every position recomputed), as toolkits' decoders without incremental state do. A stricter
baseline is printed too: greedy prefix recomputation that projects only the last position to
the vocabulary (the Annotated Transformer's loop). All figures come from one run on this
machine, interleaved, best of the repeats, so the ratios are like for like.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch
from machine import describe  # benchmarks/machine.py

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer_mt.decoding import beam_search, greedy_decode


def timed(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@torch.inference_mode()
def greedy_last_position_only(model: Transformer, src: torch.Tensor, n: int) -> list[list[int]]:
    """Greedy prefix recomputation that sends only the last decoder state through the output layer."""
    memory, mask = model.encode(src)
    prefix = torch.full((src.size(0), 1), BOS_ID)
    for step in range(n + 1):
        # No self mask: the causal kernel, as Transformer.decode runs teacher-forced prefixes.
        states, _, _ = model.decoder(prefix, memory, mask, None)  # (B, t, D)
        logprobs = model.generator(states[:, -1]).log_softmax(-1)  # (B, V)
        logprobs[:, [PAD_ID, BOS_ID]] = -torch.inf
        if step < n:
            logprobs[:, EOS_ID] = -torch.inf
        prefix = torch.cat([prefix, logprobs.argmax(-1, keepdim=True)], dim=1)
    return prefix[:, 1:-1].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument(
        "--length", type=int, default=25, help="source and output tokens per sentence"
    )
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument(
        "--repeats", type=int, default=2, help="rounds over all variants; the best counts"
    )
    args = parser.parse_args()
    print(describe())
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model = Transformer(TransformerConfig(name="base", vocab_size=args.vocab)).eval()
    src = torch.randint(4, args.vocab, (args.sentences, args.length))
    src[:, -1] = EOS_ID
    n = args.length  # exactly n output tokens: no EOS before, only EOS after
    common = dict(max_len_a=0.0, max_len_b=n, min_len=n)

    def greedy(use_cache: bool) -> None:
        out = greedy_decode(model, src, use_cache=use_cache, **common)
        assert all(len(o) == n for o in out)

    def beam(use_cache: bool) -> None:
        out = beam_search(model, src, beam_size=args.beam, alpha=0.6, use_cache=use_cache, **common)
        assert all(len(h[0].tokens) == n for h in out)

    print(
        f"base shape, vocab {args.vocab}, {args.sentences} sentences x {args.length} tokens in one batch, "
        f"outputs forced to {n} tokens; torch {torch.__version__}, {args.threads} threads, "
        f"{platform.processor() or platform.machine()}"
    )
    runs = {
        "greedy, cached": lambda: greedy(True),
        "greedy, uncached": lambda: greedy(False),
        "greedy, uncached, last position only": lambda: greedy_last_position_only(model, src, n),
        f"beam {args.beam}, cached": lambda: beam(True),
        f"beam {args.beam}, uncached": lambda: beam(False),
    }
    best = {name: float("inf") for name in runs}
    for _ in range(args.repeats):  # interleaved, so load on the machine hits every variant alike
        for name, fn in runs.items():
            best[name] = min(best[name], timed(fn, 1))
    rate = {name: args.sentences / seconds for name, seconds in best.items()}
    for name in runs:
        print(f"{name:<40} {rate[name]:8.2f} sentences/s")
    greedy_cached, beam_cached = rate["greedy, cached"], rate[f"beam {args.beam}, cached"]
    print(f"cached/uncached, greedy: {greedy_cached / rate['greedy, uncached']:.1f}x")
    print(
        f"cached/uncached, beam {args.beam}: {beam_cached / rate[f'beam {args.beam}, uncached']:.1f}x"
    )
    print(
        f"cached/uncached, greedy, against last-position-only recomputation: "
        f"{greedy_cached / rate['greedy, uncached, last position only']:.1f}x"
    )


if __name__ == "__main__":
    main()
