"""Decoding speed on the same weights: ours (cached, uncached, int8) against CTranslate2 (fp32, int8).

    python benchmarks/decode.py [--sentences 100] [--length 25] [--vocab 8000] [--threads 2]
    python benchmarks/decode.py --no-ct2          # without CTranslate2 (pip install -e ".[ct2]")

A base-shape model (6+6 layers, d_model 512, FFN 2048, 8 heads) with random weights decodes one
batch of source sentences of ``--length`` tokens; every output is forced to exactly ``--length``
tokens (EOS masked until then, then forced; CTranslate2 gets the same minimum and maximum), so
every decoder does the same work. Greedy and beam search (``--beam``), each:

- ours, cached: the KV cache (``use_cache=True``), fp32;
- ours, cached, oneDNN GEMMs, fp32: eager, with every fp32 ``F.linear`` sent to oneDNN instead
  of MKL (``decoding/onednn.py``; the compiled variant does this too): what the kernel choice
  alone gains, apart from compiling;
- ours, cached, compiled, fp32 / int8: the cached step as one compiled graph over a fixed-capacity
  cache (``compile=True``, ``decode.compile=true``); its first call compiles and is timed apart,
  with the number of sentences after which compiling has paid for itself;
- ours, cached, int8: the same after ``quantize_for_decoding(model, "int8")``: every
  ``nn.Linear`` an ``Int8Linear`` (weights int8 per output row, activations quantized on the
  fly, fbgemm's kernel; ``decode.quantize=int8``);
- ours, uncached: the decoder re-run over the whole prefix at every step, only the last
  position sent through the output layer (the Annotated Transformer's loop; the stricter
  baseline, for beam search as for greedy);
- CTranslate2 fp32 and int8: ``scripts/export_ct2.py``'s conversion of the same weights, run
  with the same number of threads.

Sentences/s, and each one's ratio to CTranslate2 fp32 of the same search. All variants run
interleaved in one process (best of ``--repeats``), so the ratios are like for like. Beside them,
GFLOP/s: the search's arithmetic (``search_flops``: the encoder, the cross-attention keys and
values, every step's layers and output layer, one row per beam from the first step) over its
time, against the fp32 GEMM ceiling measured in the same run (oneDNN and MKL, a product of the
beam step's largest shape): how much of the processor's matrix throughput a decoder turns into
translations.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import torch
from machine import describe  # benchmarks/machine.py

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.decoding import beam_search, greedy_decode, quantize_for_decoding
from transformer_mt.decoding.onednn import onednn_linears
from transformer_mt.model.vocab import EOS_ID


def ct2_translators(model: Transformer, folder: str, threads: int) -> dict:
    """The model exported to CTranslate2 twice (fp32, int8), loaded with ``threads`` threads."""
    import ctranslate2

    from transformer_mt.deploy.ct2 import ct2_spec

    pieces = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(4, model.cfg.vocab_size)]
    out = {}
    for name, quantization in (("fp32", None), ("int8", "int8")):
        spec = ct2_spec(model, pieces)
        spec.validate()
        spec.optimize(quantization=quantization)
        path = Path(folder) / name
        path.mkdir()
        spec.save(str(path))
        out[name] = ctranslate2.Translator(
            str(path), device="cpu", compute_type=quantization or "float32", intra_threads=threads
        )
    return out


def search_flops(cfg: TransformerConfig, sentences: int, length: int, rows: int) -> float:
    """Floating-point operations (2 per multiply-add) of decoding ``sentences`` sources of
    ``length`` tokens into ``length`` tokens plus EOS, with ``rows`` rows per sentence (1 greedy,
    K beams) at every step; masked, padded or repeated work is not counted."""
    d, ff, layers, V = cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.vocab_size
    S = length
    encoder = sentences * S * layers * (4 * d * d + 2 * d * ff + 2 * S * d)
    cross_kv = sentences * S * layers * 2 * d * d
    steps = length + 1  # every token, then EOS
    prefix = steps * (steps + 1) / 2  # self-attention keys summed over the steps
    per_row = layers * (steps * (6 * d * d + 2 * d * ff + 2 * S * d) + 2 * prefix * d)
    per_row += steps * d * V
    return 2.0 * (encoder + cross_kv + sentences * rows * per_row)


def gemm_ceiling(m: int, k: int, n: int, repeats: int = 20) -> dict[str, float]:
    """GFLOP/s of an fp32 (m x k) x (k x n) product, best of ``repeats``: through MKL (what
    ``F.linear`` uses on CPUs) and through oneDNN (what the compiled step uses)."""
    x, w = torch.randn(m, k), torch.randn(n, k)
    out = {}
    for name, route in (
        ("MKL", contextlib.nullcontext()),
        ("oneDNN", onednn_linears(torch.device("cpu"))),
    ):
        with route, torch.inference_mode():
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                torch.nn.functional.linear(x, w)
                best = min(best, time.perf_counter() - start)
        out[name] = 2 * m * k * n / best / 1e9
    return out


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
    parser.add_argument("--no-ct2", action="store_true", help="leave CTranslate2 out")
    parser.add_argument("--no-uncached", action="store_true", help="leave the slow baseline out")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    args = parser.parse_args()
    print(describe())
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model = Transformer(TransformerConfig(name="base", vocab_size=args.vocab)).eval()
    quantized = quantize_for_decoding(model, "int8")
    src = torch.randint(4, args.vocab, (args.sentences, args.length))
    src[:, -1] = EOS_ID
    n = args.length  # exactly n output tokens: no EOS before, only EOS after
    common = dict(max_len_a=0.0, max_len_b=n, min_len=n)
    tmp = tempfile.TemporaryDirectory()
    ct2 = {} if args.no_ct2 else ct2_translators(model, tmp.name, args.threads)
    pieces = [[f"w{i}" for i in row[:-1].tolist()] for row in src]  # EOS: add_source_eos

    def ours(
        net: Transformer,
        beam: int,
        use_cache: bool = True,
        compile: bool = False,
        onednn: bool = False,
    ):
        def run() -> None:
            with onednn_linears(torch.device("cpu")) if onednn else contextlib.nullcontext():
                search()

        def search() -> None:
            if beam == 1:
                out = greedy_decode(net, src, use_cache=use_cache, compile=compile, **common)
                assert all(len(o) == n for o in out)
            else:
                found = beam_search(
                    net,
                    src,
                    beam_size=beam,
                    alpha=0.6,
                    use_cache=use_cache,
                    compile=compile,
                    **common,
                )
                assert all(len(h[0].tokens) == n for h in found)

        return run

    def theirs(name: str, beam: int):
        def run() -> None:
            found = ct2[name].translate_batch(
                pieces,
                beam_size=beam,
                max_decoding_length=n,
                min_decoding_length=n,
                max_input_length=0,
                suppress_sequences=[["<pad>"], ["<s>"]],
            )
            assert all(len(r.hypotheses[0]) == n for r in found)

        return run

    runs: dict[tuple[str, str], object] = {}
    for beam in (1, args.beam):
        search = "greedy" if beam == 1 else f"beam {beam}"
        runs[(search, "ours, cached, fp32")] = ours(model, beam)
        runs[(search, "ours, cached, oneDNN GEMMs, fp32")] = ours(model, beam, onednn=True)
        if not args.no_compile:
            runs[(search, "ours, cached, compiled, fp32")] = ours(model, beam, compile=True)
        runs[(search, "ours, cached, int8")] = ours(quantized, beam)
        if not args.no_compile:
            runs[(search, "ours, cached, compiled, int8")] = ours(quantized, beam, compile=True)
        if not args.no_uncached:
            runs[(search, "ours, uncached (last position only), fp32")] = ours(model, beam, False)
        for name in ct2:
            runs[(search, f"CTranslate2 {name}")] = theirs(name, beam)
    print(
        f"base shape, vocab {args.vocab}, {args.sentences} sentences x {args.length} tokens in one "
        f"batch, outputs forced to {n} tokens, {args.threads} threads"
        + ("" if ct2 else "; CTranslate2 left out")
    )
    compile_seconds = {}
    for key, fn in runs.items():  # compiled variants: the first call compiles (timed apart)
        if "compiled" in key[1]:
            start = time.perf_counter()
            fn()
            compile_seconds[key] = time.perf_counter() - start
    best = {key: float("inf") for key in runs}
    for _ in range(args.repeats):  # interleaved, so load on the machine hits every variant alike
        for key, fn in runs.items():
            start = time.perf_counter()
            fn()
            best[key] = min(best[key], time.perf_counter() - start)
    rate = {key: args.sentences / seconds for key, seconds in best.items()}
    flops = {
        search: search_flops(model.cfg, args.sentences, n, 1 if search == "greedy" else args.beam)
        for search, _ in runs
    }
    print(f"{'search':<8} {'decoder':<44} {'sentences/s':>12} {'vs CTranslate2 fp32':>20} GFLOP/s")
    for (search, name), value in rate.items():
        reference = rate.get((search, "CTranslate2 fp32"))
        ratio = f"{value / reference:.2f}x" if reference else "-"
        gflops = flops[search] / best[(search, name)] / 1e9
        print(f"{search:<8} {name:<44} {value:12.2f} {ratio:>20} {gflops:7.0f}")
    shape = (args.sentences * args.beam, model.cfg.d_model, model.cfg.d_ff)
    ceiling = gemm_ceiling(*shape)
    print(
        f"fp32 GEMM ceiling, ({shape[0]} x {shape[1]}) x ({shape[1]} x {shape[2]}): "
        + ", ".join(f"{name} {value:.0f} GFLOP/s" for name, value in ceiling.items())
        + f"; a search's arithmetic: greedy {flops['greedy'] / 1e9:.0f} GFLOP, "
        + f"beam {args.beam} {flops[f'beam {args.beam}'] / 1e9:.0f} GFLOP"
    )
    for (search, name), seconds in compile_seconds.items():
        run_seconds = best[(search, name)]
        eager = best[(search, name.replace("compiled, ", ""))]
        saved = (eager - run_seconds) / args.sentences  # per sentence
        pays = (
            f"pays off after {(seconds - run_seconds) / saved:,.0f} sentences"
            if saved > 0
            else "never pays off"
        )
        print(
            f"first call of {search}, {name}: {seconds:.1f} s (compiling included), "
            f"then {run_seconds:.2f} s; {pays}"
        )
    if not args.no_uncached:
        for beam in (1, args.beam):
            search = "greedy" if beam == 1 else f"beam {beam}"
            cached = rate[(search, "ours, cached, fp32")]
            uncached = rate[(search, "ours, uncached (last position only), fp32")]
            print(f"cached/uncached, {search}: {cached / uncached:.1f}x")
    tmp.cleanup()


if __name__ == "__main__":
    main()
