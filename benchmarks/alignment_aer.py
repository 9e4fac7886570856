r"""AER of trained models' cross-attention next to eflomal, on the same text, in one run.

    export TRANSFORMER_MT_DATA=/path/to/data      # the folder of the gold sets (see docs/attention.md)
    python benchmarks/alignment_aer.py --run guided=RUN_A --run plain=RUN_B --gold graca xlwa
    python benchmarks/alignment_aer.py --run deen=RUN --gold bicici   # a German-English run
    python benchmarks/alignment_aer.py --run esen=RUN_ES_EN --run enes=RUN_EN_ES --gold graca xlwa
    python benchmarks/alignment_aer.py --run deen=RUN --gold-files test.de test.en gold.wa \
        --one-indexed --reverse-gold                # any other gold set, as files

For every gold set: eflomal in both directions and their grow-diag-final-and symmetrization,
given the first run's training pairs plus the gold pairs' sentences (without their links), as
an unsupervised aligner is evaluated (lowercased: it works on word types); then for every run:
its best head over every layer x head (argmax, shift and full-context readings), its best
layer with heads averaged, the shift reading of that layer, and (a run trained with
``align.guided``) the guided head, read as the run trained it: with the whole target as
context (``align.mode=full``), or a word from the row where it is the input
(``align.mode=shift``). A run that translates the other way (EN->ES beside ES->EN) is scored on
the same gold turned round, and its guided (else best) head's links are symmetrized with each
forward run's (intersection and grow-diag-final-and), as Garg et al. combine their two
directions. Each head is also scored against eflomal's grow-diag-final-and links as if they
were the gold: how closely it follows the aligner a guided head is taught by; and, at the end,
each guided head against the very links it was trained on, on ``--teacher-pairs`` of its
training pairs (in-domain: how well it fits its supervision at all). ``--by-length``
adds the AER of eflomal and of each run's guided (else best) head by source sentence length.
``--join-short 2 3 4`` tells length apart from content: each gold set's short pairs (up to
``--short-words`` source words) are scored alone, and joined 2, 3 and 4 at a time (a space
between the parts, links moved; ``GoldSet.joined``): as long as natural long sentences, but
holding only what the short ones hold.
``--tune-on xlwa_dev`` reads each guided (else best) head's links by every method of
``transformer_mt.align.extract`` (argmax, intersect, threshold, grow-diag), each tau chosen on
that development set alone, and prints the ceiling beside them: eflomal's own links (the
teacher) turned into per-row distributions and read back by the same methods, against the gold
(with ``--by-length``, the ceiling's lengths too). With two directions, each direction's head is
read by every method (its own tau) and each pair of readings is symmetrized; the two heads'
matrices are also merged cell by cell (geometric mean) and read by every method
(tau chosen on the dev set's merged matrices). The dev set names the one combination to report;
with ``--by-length`` that combination's AER minus eflomal's is printed per length bucket too
(where a gap to the teacher lives, apart from the gold set's own rise with length).
AER is lower-better; P and R are precision against possible links and recall of sure ones.
``pip install -e ".[align]"`` for eflomal.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from machine import describe  # benchmarks/machine.py

from transformer_mt.align.eflomal import EFLOMAL_TOKENIZE, align_corpus, corpus_key
from transformer_mt.align.extract import (
    EXTRACTIONS,
    TUNING_GRID,
    Extraction,
    merge_directions,
    teacher_rows,
    tune,
)
from transformer_mt.align.gold import GoldSet, load_gold_set
from transformer_mt.align.links import corpus_scores, read_pharaoh, symmetrize
from transformer_mt.align.reading import READING_MODES, HeadReading, guided_reading
from transformer_mt.analysis import corpus_attention, head_rows, score_layers
from transformer_mt.analysis.report import (
    CorpusAttention,
    format_by_length,
    reading_name,
    score_head_grids,
)
from transformer_mt.checkpoint import load_model, run_data_config
from transformer_mt.data.sources import load_corpus

GOLD_SETS = {  # name -> (format, path under $TRANSFORMER_MT_DATA)
    "graca": ("graca", "word_alignment_gold_esen_graca/orig"),
    "xlwa": ("xlwa", "word_alignment_gold_esen_xlwa/orig/test.tsv"),
    "xlwa_dev": ("xlwa", "word_alignment_gold_esen_xlwa/orig/dev.tsv"),
    "bicici": ("pharaoh", "word_alignment_gold_deen_bicici"),
}
# Pharaoh sets: (first language, second language, first file, second file, links first-second)
PHARAOH_SETS = {"bicici": ("de", "en", "test.de", "test.en", "de-en.wa")}


def gold_spec(name: str, folder: Path, src_lang: str, tgt_lang: str) -> SimpleNamespace:
    """``GOLD_SETS[name]`` under ``folder`` as an ``align.gold`` entry, in the run's direction."""
    fmt, rel = GOLD_SETS[name]
    if name not in PHARAOH_SETS:
        return SimpleNamespace(format=fmt, path=str(folder / rel))
    first, second, first_file, second_file, links = PHARAOH_SETS[name]
    if {src_lang, tgt_lang} != {first, second}:
        raise SystemExit(
            f"--gold {name} pairs {first} with {second}; the run is {src_lang}->{tgt_lang}"
        )
    files = [str(folder / rel / f) for f in (first_file, second_file)]
    reverse = src_lang != first
    src, tgt = files[::-1] if reverse else files
    return SimpleNamespace(
        format="pharaoh",
        path=str(folder / rel / links),
        src=src,
        tgt=tgt,
        reverse=reverse,
        one_indexed=False,
    )


def read_links(path: str) -> list[set[tuple[int, int]]]:
    return [read_pharaoh(line)[0] for line in Path(path).read_text().splitlines()]


def run_eflomal(
    gold: GoldSet,
    train_src: list[str],
    train_tgt: list[str],
    cache: Path,
    tokenize: tuple[str, str] | None,
):
    """eflomal's two directions on the gold pairs and their grow-diag-final-and (on the tokens
    eflomal saw, as a guided run's teacher), aligned together with the training pairs
    (``transformer_mt.align.eflomal``, cached by the text), and the seconds it took."""
    # a run trained with data.extra_train holds the gold sentences already: once is enough
    known = set(zip(gold.sources, gold.targets))
    kept = [(s, t) for s, t in zip(train_src, train_tgt) if (s, t) not in known]
    src = gold.sources + [s for s, _ in kept]
    tgt = gold.targets + [t for _, t in kept]
    started = time.perf_counter()
    key = f"benchmark_{corpus_key(src, tgt)}"
    paths = align_corpus(lambda: (src, tgt), cache / "alignments", key, tokenize=tokenize)
    seconds = time.perf_counter() - started
    n = len(gold)
    forward, backward, symmetric = (
        read_links(paths[k])[:n] for k in ("forward", "reverse", "gdfa")
    )
    return forward, backward, symmetric, seconds


def guided_head(run: Path, model) -> HeadReading | None:
    """The head a run trained with align.guided, read as trained; else None."""
    return guided_reading(run, model.cfg.n_layers, model.cfg.n_heads)


def teacher_agreement(run: Path, n: int, seed: int = 0) -> tuple[int, float, float, float] | None:
    """(pairs, AER, P, R) of a guided run's head against the links it was trained on, on ``n``
    of its training pairs drawn at random (seeded); None for a run without guidance."""
    data = run_data_config(run)
    model, tokenizer, _ = load_model(run)
    guided = guided_head(run, model)
    train = load_corpus(data)["train"]
    if guided is None or "alignment" not in train.column_names:
        return None
    rows = sorted(np.random.default_rng(seed).choice(len(train), min(n, len(train)), replace=False))
    picked = train.select(rows)
    teacher = [(links, links) for links in (read_pharaoh(a)[0] for a in picked["alignment"])]
    pairs, _ = GoldSet("training pairs", picked["src"], picked["tgt"], teacher).foldable(tokenizer)
    attention = corpus_attention(
        model, tokenizer, pairs.sources, pairs.targets, full_context=guided.full_context
    )
    s = score_layers(attention, pairs.gold, mode=guided.mode, head=guided.head)[guided.layer - 1]
    return len(pairs), s.aer, s.precision, s.recall


def score_run(name: str, run: Path, gold: GoldSet, head: HeadReading | None = None):
    """The run's rows of the table, the links of its guided (else best) head, which it is, its
    ``HeadReading`` and its word matrices; ``head``: read that one instead (a dev set)."""
    model, tokenizer, _ = load_model(run)
    usable, dropped = gold.foldable(tokenizer)
    if dropped:
        raise SystemExit(f"{name}: {dropped} pairs of {gold.name} do not fold into words")
    attention = CorpusAttention(
        *(
            corpus_attention(model, tokenizer, gold.sources, gold.targets, full_context=full)
            for full in (False, True)
        )
    )
    if head is not None:
        read = attention.full if head.full_context else attention.causal
        return [], None, "", head, [head_rows(words, head)[:, :-1] for words in read]
    grids = score_head_grids(attention, gold.gold)
    rows = []
    heads = [(r, s) for r in ("argmax", "shift", "full") for row in grids[r] for s in row[:-1]]
    reading, best = min(heads, key=lambda item: item[1].aer)
    rows.append(
        (f"{name}: best head {best.name} ({reading})", (best.aer, best.precision, best.recall))
    )
    chosen, which = best.links, "best head"
    head = HeadReading(best.layer, best.head, READING_MODES[reading])
    means = [row[-1] for row in grids["argmax"]]
    layer = min(means, key=lambda s: s.aer)
    rows.append(
        (
            f"{name}: best layer {layer.layer}, heads averaged",
            (layer.aer, layer.precision, layer.recall),
        )
    )
    shift = grids["shift"][layer.layer - 1][-1]
    rows.append(
        (f"{name}: layer {layer.layer} averaged, shift", (shift.aer, shift.precision, shift.recall))
    )
    guided = guided_head(run, model)
    if guided is not None:
        s = grids[reading_name(guided)][guided.layer - 1][guided.head - 1]
        rows.append((f"{name}: guided head {guided.name}", (s.aer, s.precision, s.recall)))
        chosen, which, head = s.links, "guided head", guided
    read = attention.full if head.full_context else attention.causal
    matrices = [head_rows(words, head)[:, :-1] for words in read]
    return rows, chosen, which, head, matrices


def tuned_on_dev(matrices: list, dev: GoldSet) -> dict[str, Extraction]:
    """Every extraction method, its tau chosen on the dev set's matrices and gold alone."""
    out = {}
    for method in EXTRACTIONS:
        tau = tune(matrices, dev.gold, method)[0] if method in TUNING_GRID else None
        out[method] = Extraction(method, tau, f"tuned on {dev.name}")
    return out


def teacher_matrices(links: list, gold: GoldSet) -> list:
    """An aligner's links as the per-row distributions a perfectly fitted head would give."""
    return [
        teacher_rows(ls, len(t.split()), len(s.split()))
        for ls, s, t in zip(links, gold.sources, gold.targets)
    ]


def method_rows(label: str, matrices: list, gold: GoldSet, extractions: dict) -> list:
    """(label, links, (AER, P, R)) of each method read from ``matrices``."""
    out = []
    for extraction in extractions.values():
        links = [extraction.links(m) for m in matrices]
        out.append((f"{label} by {extraction.name}", links, corpus_scores(links, gold.gold)))
    return out


def combine_directions(
    prefix: str,
    readings: list,
    gold: list,
    dev_pairs: dict | None,
    dev_gold: list | None,
    matrices: tuple[list, list] | None = None,
    dev_matrices: tuple[list, list] | None = None,
) -> tuple[list, tuple[str, float] | None]:
    """Two directions' readings, each pair combined by intersection and grow-diag-final-and;
    and the two heads' matrices merged cell by cell, then read by every method.

    Args:
        readings: (label, method, forward links, backward links): one head of each direction
            read by ``method``, both in the first direction's (source, target) order.
        dev_pairs: per method, (forward, backward) links of the dev set, read the same way.
        matrices: (forward, backward) word matrices of the scored pairs, both (W_tgt, W_src) in
            the first direction: merged (geometric mean) and read by each method, its tau
            chosen on ``dev_matrices`` merged the same way (needs the dev set).

    Returns:
        (label, links, (AER, P, R)) of every combination against ``gold``, and the label of
        the one with the lowest AER on the dev set with that AER (None without a dev set).
    """
    rows, on_dev = [], {}
    for reading, method, forward, backward in readings:
        for how in ("intersect", "grow-diag-final-and"):
            links = [symmetrize(f, b, how) for f, b in zip(forward, backward)]
            label = f"{prefix}: {reading}, {how}"
            rows.append((label, links, corpus_scores(links, gold)))
            if dev_pairs is not None:
                dev_forward, dev_backward = dev_pairs[method]
                combined = [symmetrize(f, b, how) for f, b in zip(dev_forward, dev_backward)]
                on_dev[label] = corpus_scores(combined, dev_gold)[0]
    if matrices is not None and dev_matrices is not None:
        merged = [merge_directions(f, b) for f, b in zip(*matrices)]
        dev_merged = [merge_directions(f, b) for f, b in zip(*dev_matrices)]
        for method in EXTRACTIONS:
            tau = tune(dev_merged, dev_gold, method)[0] if method in TUNING_GRID else None
            extraction = Extraction(method, tau)
            label = f"{prefix}: product, {extraction.name}"
            links = [extraction.links(m) for m in merged]
            rows.append((label, links, corpus_scores(links, gold)))
            dev_links = [extraction.links(m) for m in dev_merged]
            on_dev[label] = corpus_scores(dev_links, dev_gold)[0]
    if not on_dev:
        return rows, None
    best = min(on_dev, key=on_dev.get)
    return rows, (best, on_dev[best])


def turn(links: set[tuple[int, int]], reverse: bool) -> set[tuple[int, int]]:
    """A reverse run's links (its source is the first run's target) in the first run's direction."""
    return {(j, i) for i, j in links} if reverse else links


def is_reverse(run: Path, src_lang: str, tgt_lang: str) -> bool:
    """Does the run translate tgt_lang -> src_lang (the first run's direction turned round)?"""
    data = run_data_config(run)
    if (data.src_lang, data.tgt_lang) == (src_lang, tgt_lang):
        return False
    if (data.src_lang, data.tgt_lang) == (tgt_lang, src_lang):
        return True
    raise SystemExit(
        f"{run}: translates {data.src_lang}->{data.tgt_lang}; the first --run is "
        f"{src_lang}->{tgt_lang} (runs must share it, or be its reverse)"
    )


def both_ways(reverse: dict[str, bool]) -> list[tuple[str, str]]:
    """Every (forward run, reverse run) pair by name: their heads' links are symmetrized."""
    return [(f, b) for f in reverse if not reverse[f] for b in reverse if reverse[b]]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", action="append", required=True, help="NAME=RUN_DIR (repeatable)")
    parser.add_argument("--gold", nargs="*", default=[], choices=sorted(GOLD_SETS))
    parser.add_argument("--gold-files", nargs=3, metavar=("SRC", "TGT", "LINKS"))
    parser.add_argument("--one-indexed", action="store_true")
    parser.add_argument("--reverse-gold", action="store_true")
    parser.add_argument("--data-dir", type=Path, default=os.environ.get("TRANSFORMER_MT_DATA"))
    parser.add_argument("--train-limit", type=int, default=1_000_000, help="eflomal's extra pairs")
    parser.add_argument(
        "--eflomal-tokenize",
        choices=EFLOMAL_TOKENIZE,
        default="none",
        help="how eflomal's words are cut: none (as they are, as guided alignment's teacher "
        "sees them) or moses (Moses-tokenized: a stronger baseline)",
    )
    parser.add_argument(
        "--by-length", action="store_true", help="AER by source sentence length as well"
    )
    parser.add_argument(
        "--join-short",
        type=int,
        nargs="+",
        metavar="K",
        help="also score each --gold set's short pairs (at most --short-words source words) "
        "alone and joined K at a time: long inputs that hold only short content",
    )
    parser.add_argument("--short-words", type=int, default=10, help="see --join-short")
    parser.add_argument(
        "--tune-on",
        choices=sorted(GOLD_SETS),
        help="a development gold set: read every head by each extraction method, tau chosen "
        "on it, with eflomal's ceiling (never name a set you report here)",
    )
    parser.add_argument(
        "--teacher-pairs",
        type=int,
        default=400,
        help="training pairs on which a guided head is scored against its own supervision (0: none)",
    )
    args = parser.parse_args()
    runs = [(n, Path(d)) for n, _, d in (r.partition("=") for r in args.run)]
    print(describe())
    data = run_data_config(runs[0][1])
    reverse = {name: is_reverse(run, data.src_lang, data.tgt_lang) for name, run in runs}
    train = load_corpus(data)["train"]
    limit = min(args.train_limit, len(train))
    tokenize = (data.src_lang, data.tgt_lang) if args.eflomal_tokenize == "moses" else None
    cut = "words Moses-tokenized" if tokenize else "words as they are"
    train_src, train_tgt = train["src"][:limit], train["tgt"][:limit]
    sets = []
    for name in args.gold:
        if args.data_dir is None:
            raise SystemExit(
                "--gold needs --data-dir or TRANSFORMER_MT_DATA (the gold folders' parent)"
            )
        spec = gold_spec(name, args.data_dir, data.src_lang, data.tgt_lang)
        sets.append(load_gold_set(name, spec, data.src_lang, data.tgt_lang))
        if args.join_short:
            short = [sets[-1].joined(k, args.short_words) for k in [1, *args.join_short]]
            sets += [joined for joined in short if len(joined)]
    if args.gold_files:
        src, tgt, links = args.gold_files
        spec = SimpleNamespace(
            format="pharaoh",
            path=links,
            src=src,
            tgt=tgt,
            reverse=args.reverse_gold,
            one_indexed=args.one_indexed,
        )
        sets.append(load_gold_set(Path(links).name, spec, data.src_lang, data.tgt_lang))
    dev = None
    if args.tune_on is not None:
        if args.tune_on in args.gold:
            raise SystemExit(f"--tune-on {args.tune_on} is also a --gold set: tune on another")
        spec = gold_spec(args.tune_on, args.data_dir, data.src_lang, data.tgt_lang)
        dev = load_gold_set(args.tune_on, spec, data.src_lang, data.tgt_lang)
    tuned, methods_of, ceiling = {}, {}, None
    dev_reads = {}  # per run and head: its dev links by each method, in the first run's direction
    dev_mats = {}  # per run: its head's dev matrices, (W_tgt, W_src) in the first run's direction
    for gold in sets:
        methods_of = {}
        forward, backward, symmetric, seconds = run_eflomal(
            gold, train_src, train_tgt, Path(data.cache_dir), tokenize
        )
        print(
            f"\n{gold.name}: {len(gold)} pairs; eflomal given {limit:,} training pairs of "
            f"data={data.name} as well, {cut} ({seconds:.0f} s)"
        )
        print(f"{'aligner':<52} AER     P      R")
        for label, links in (
            ("eflomal source->target", forward),
            ("eflomal target->source", backward),
            ("eflomal grow-diag-final-and", symmetric),
        ):
            aer, p, r = corpus_scores(links, gold.gold)
            print(f"{label:<52} {aer:.3f}  {p:.3f}  {r:.3f}")
        picked = [("eflomal grow-diag-final-and", symmetric)]  # for --by-length and agreement
        chosen_links = {}
        heads = {}
        mats_of = {}  # per run: its head's matrices in the first run's direction
        for name, run in runs:
            found = score_run(name, run, gold.reversed() if reverse[name] else gold)
            rows, chosen, which, heads[name], matrices = found
            mats_of[name] = [m.T if reverse[name] else m for m in matrices]
            if dev is not None:
                key = (name, heads[name])  # once per run and head: its matrices on the dev set
                own_dev = dev.reversed() if reverse[name] else dev
                own_gold = gold.reversed() if reverse[name] else gold
                if key not in tuned:
                    dev_rows = score_run(name, run, own_dev, head=heads[name])[-1]
                    tuned[key] = tuned_on_dev(dev_rows, own_dev)
                    dev_reads[name] = {
                        e.method: [turn(e.links(m), reverse[name]) for m in dev_rows]
                        for e in tuned[key].values()
                    }
                    dev_mats[name] = [m.T if reverse[name] else m for m in dev_rows]
                read = method_rows(f"{name}: {which}", matrices, own_gold, tuned[key])
                # scored in its own direction, kept in the first run's
                methods_of[name] = [
                    (lb, [turn(ls, reverse[name]) for ls in li], sc) for lb, li, sc in read
                ]
            for label, (aer, p, r) in rows:
                print(f"{label:<52} {aer:.3f}  {p:.3f}  {r:.3f}")
            if reverse[name]:  # back into the first run's direction, as eflomal's are
                chosen = [{(j, i) for i, j in links} for links in chosen]
            chosen_links[name] = chosen
            picked.append((f"{name}: {which}", chosen))
        both = []  # (label, links, scores) of two directions' heads combined
        chosen_both = []  # (label, dev AER) of each pair's combination chosen on the dev set
        for one, other in both_ways(reverse):
            readings = [("argmax", "argmax", chosen_links[one], chosen_links[other])]
            if dev is not None:  # each direction read by each method (its own tau), then combined
                for (label, f, _), (other_label, b, _) in zip(methods_of[one], methods_of[other]):
                    name, other_name = label.split(" by ")[-1], other_label.split(" by ")[-1]
                    if name == "argmax":  # read above, from the heads' own rows
                        continue
                    # "grow-diag 0.05" beside "grow-diag 0.1" reads "grow-diag 0.05/0.1"
                    taus = name if name == other_name else f"{name}/{other_name.split()[-1]}"
                    readings.append((taus, name.split()[0], f, b))
            dev_pairs = dev_matrices = None
            if dev is not None:
                dev_pairs = {m: (dev_reads[one][m], dev_reads[other][m]) for m in dev_reads[one]}
                dev_matrices = (dev_mats[one], dev_mats[other])
            rows, chosen_one = combine_directions(
                f"{one}+{other}",
                readings,
                gold.gold,
                dev_pairs,
                dev.gold if dev else None,
                (mats_of[one], mats_of[other]),
                dev_matrices,
            )
            both += rows
            if chosen_one is not None:
                chosen_both.append(chosen_one)
        for label, _links, (aer, p, r) in both:
            print(f"{label:<52} {aer:.3f}  {p:.3f}  {r:.3f}")
        for label, aer in chosen_both:
            print(f"  chosen on {dev.name} (its AER {aer:.3f} there): {label}")
        picked += [(label, links) for label, links, _ in both]
        if dev is not None:
            # the ceiling: eflomal's links (the teacher of a guided head) as rows, read back
            teacher = teacher_matrices(symmetric, gold)
            if ceiling is None:
                *_, dev_links, _ = run_eflomal(
                    dev, train_src, train_tgt, Path(data.cache_dir), tokenize
                )
                ceiling = tuned_on_dev(teacher_matrices(dev_links, dev), dev)
            print(f"\nlinks read by each method, tau chosen on {dev.name} ({len(dev)} pairs):")
            found = method_rows("ceiling: eflomal gdfa as rows", teacher, gold, ceiling)
            found += [row for rows in methods_of.values() for row in rows]
            for label, _links, (aer, p, r) in found:
                print(f"  {label:<50} {aer:.3f}  {p:.3f}  {r:.3f}")
            # argmax is the head's own row above; the ceiling is no model's links, but its
            # lengths say how flat a head that copied its teacher could be
            picked += [
                (label, ls)
                for label, ls, _ in found
                if label.split(" by ")[-1] != "argmax" and "ceiling" not in label
            ]
            ceiling_rows = [(label, ls) for label, ls, _ in found if "ceiling" in label]
        if args.by_length:
            print(f"\nAER by source length (words) on {gold.name}:")
            for label, links in picked + (ceiling_rows if dev is not None else []):
                print(f"  {label}: {format_by_length(links, gold.gold, gold.sources)}")
            if chosen_both:  # how much of a rise with length is the teacher's own
                print(
                    f"\nthe chosen combinations minus eflomal grow-diag-final-and, on {gold.name}:"
                )
                for label, _aer in chosen_both:
                    links = dict(picked)[label]
                    excess = format_by_length(links, gold.gold, gold.sources, minus=symmetric)
                    print(f"  {label}: {excess}")
        # how closely each head follows eflomal, the teacher of a guided head, on these pairs
        teacher = [(links, links) for links in symmetric]
        print(f"\nagainst eflomal grow-diag-final-and as if it were the gold, on {gold.name}:")
        for label, links in picked[1:]:
            aer, p, r = corpus_scores(links, teacher)
            print(f"  {label:<50} {aer:.3f}  {p:.3f}  {r:.3f}")

    if args.teacher_pairs:
        print("\nguided heads against the links they were trained on (their training pairs):")
        for name, run in runs:
            found = teacher_agreement(run, args.teacher_pairs)
            if found is not None:
                n, aer, p, r = found
                print(f"  {f'{name}: {n} pairs':<50} {aer:.3f}  {p:.3f}  {r:.3f}")


if __name__ == "__main__":
    main()
