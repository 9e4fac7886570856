"""Gold word alignments: the readers of each format and ``GoldSet``, a set read in a model's direction.

Formats: Pharaoh/talp (one line per sentence, ``i-j`` sure, ``ipj`` possible), NAACL (one link
per line, ``sentence i j [S|P]``), XL-WA's TSV (Martelli et al. 2023) and Graca et al.'s
``<s snum=N>`` sentence markup. A file that is empty or not UTF-8, and a set without one sure
link, are ``UserError``s: scoring against nothing would read as a perfect AER.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from transformer_mt.align.links import Gold, Links, drop_outside, format_pharaoh, read_pharaoh, swap
from transformer_mt.align.pieces import folds, word_starts
from transformer_mt.errors import UserError
from transformer_mt.model.vocab import EOS_ID

log = logging.getLogger(__name__)


def read_lines(path: str | Path, what: str = "file") -> list[str]:
    """The lines of a UTF-8 text file; a missing, empty or non-UTF-8 file is a ``UserError``."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such {what}")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise UserError(
            f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); convert it, e.g. "
            f"iconv -f latin1 -t utf-8"
        ) from None
    if not any(line.strip() for line in lines):
        raise UserError(f"{path}: the {what} is empty")
    return lines


def read_sentences(path: str | Path) -> list[str]:
    """One sentence per line; an empty line, an empty file or one that is not UTF-8 is refused."""
    lines = read_lines(path, "sentence file")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            raise UserError(f"{path}:{n}: empty line; every line must hold one sentence")
    return lines


def read_gold(path: str | Path, one_indexed: bool = False, reverse: bool = False) -> Gold:
    """Sure and possible links per sentence of a Pharaoh or NAACL file, as (source i, target j).

    NAACL numbers sentences from 1. ``reverse`` swaps i and j, for gold written in the other
    direction than the model translates. An empty line of a Pharaoh file is a sentence
    without links.
    """
    lines = read_lines(path, "gold file")
    shift = 1 if one_indexed else 0
    tokens = lines[0].split()
    naacl = len(tokens) in (3, 4) and all(t.isdigit() for t in tokens[:3])
    gold: Gold = []
    if naacl:
        by_sentence: dict[int, tuple[Links, Links]] = {}
        for n, line in enumerate(lines, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) not in (3, 4) or not all(t.isdigit() for t in parts[:3]):
                raise UserError(f"{path}:{n}: {line!r} is not 'sentence i j [S|P]'")
            sent, i, j = (int(t) for t in parts[:3])
            sure, possible = by_sentence.setdefault(sent, (set(), set()))
            link = (i - shift, j - shift)
            possible.add(link)
            if len(parts) == 3 or parts[3].upper() == "S":
                sure.add(link)
        gold = [by_sentence.get(n, (set(), set())) for n in range(1, max(by_sentence) + 1)]
    else:
        for n, line in enumerate(lines, 1):
            try:
                gold.append(read_pharaoh(line, one_indexed))
            except ValueError as err:
                raise UserError(f"{path}:{n}: {err}") from None
    return swap(gold) if reverse else gold


def read_xlwa(path: str | Path, reverse: bool = False) -> tuple[list[str], list[str], Gold]:
    """An XL-WA file: ``English<TAB>other<TAB>i-j ...`` per line.

    Links are 0-indexed, English first, and all sure (XL-WA has no possible links).

    Returns:
        English sentences, other-language sentences, and (sure, possible) per line with
        i counting English words; ``reverse`` makes i count the other language's words
        (e.g. for Spanish->English).
    """
    english, other, gold = [], [], []
    for n, line in enumerate(read_lines(path, "gold file"), 1):
        fields = line.split("\t")
        if len(fields) < 3:
            raise UserError(
                f"{path}:{n}: expected English<TAB>sentence<TAB>links, found {len(fields)} column(s)"
            )
        try:
            sure, _ = read_pharaoh(fields[2])
        except ValueError as err:
            raise UserError(f"{path}:{n}: {err}") from None
        english.append(fields[0].strip())
        other.append(fields[1].strip())
        gold.append((sure, set(sure)))
    return english, other, swap(gold) if reverse else gold


def read_tagged_sentences(path: str | Path) -> list[str]:
    """Sentences marked up as ``<s snum=N> words </s>`` (Graca et al. 2008), in snum order."""
    sentences: dict[int, str] = {}
    pattern = re.compile(r"^\s*<s snum=(\d+)>(.*)</s>\s*$")
    for n, line in enumerate(read_lines(path, "sentence file"), 1):
        if not line.strip():
            continue
        match = pattern.match(line)
        if match is None:
            raise UserError(f"{path}:{n}: expected '<s snum=N> words </s>', found {line[:60]!r}")
        sentences[int(match.group(1))] = " ".join(match.group(2).split())
    if sorted(sentences) != list(range(1, len(sentences) + 1)):
        raise UserError(f"{path}: sentence numbers are not 1..{len(sentences)}")
    return [sentences[k] for k in range(1, len(sentences) + 1)]


def clean_gold(
    gold: Gold, sources: list[str], targets: list[str], path: str | Path
) -> tuple[Gold, list[str]]:
    """Gold links outside their sentences left out (a known typo of a gold set), with a warning each."""
    try:
        cleaned, dropped = drop_outside(gold, sources, targets)
    except ValueError as err:
        raise UserError(f"{path}: {err}") from None
    warnings = [
        f"{path} sentence {n}: links {format_pharaoh(bad)} fall outside "
        f"{len(sources[n - 1].split())} source x {len(targets[n - 1].split())} target words; "
        f"left out (wrong --one-indexed or --reverse-gold?)"
        for n, bad in dropped.items()
    ]
    return cleaned, warnings


def check_sure(gold: Gold, where: str) -> Gold:
    """``gold`` itself, or a ``UserError`` when it holds no sure link (AER would mean nothing)."""
    if not any(sure for sure, _ in gold):
        raise UserError(
            f"{where}: no sure link in {len(gold)} sentence(s); check the file's format "
            f"(i-j sure, ipj possible) and that it is the gold of these sentences"
        )
    return gold


@dataclass
class GoldSetConfig:
    """A gold word-alignment set, scored while training (``align.gold.<name>``).

    format: ``graca`` (a folder with ``alignment`` and ``test.<lang>`` in Graca et al.'s
    markup), ``xlwa`` (an XL-WA TSV file), or ``pharaoh`` (``src``/``tgt`` sentence files and a
    Pharaoh/NAACL ``path``). ``graca`` and ``xlwa`` are English-first; they are turned round
    when English is the target (data.tgt_lang).
    """

    format: str = "pharaoh"
    path: str = MISSING  # a run's config.yaml or a command line may leave it out: checked below
    src: str | None = None  # pharaoh only: source sentences, one per line
    tgt: str | None = None
    reverse: bool = False  # pharaoh only: its links are target-source
    one_indexed: bool = False  # pharaoh only

    def __post_init__(self) -> None:
        if self.format not in ("graca", "xlwa", "pharaoh"):
            raise UserError(
                f"align.gold format must be graca, xlwa or pharaoh, got {self.format!r}"
            )

    @classmethod
    def typed(cls, where: str, sets: dict[str, Any]) -> dict[str, GoldSetConfig]:
        """``{name: dict or GoldSetConfig}`` -> ``{name: GoldSetConfig}``, naming bad keys.

        The config fields hold plain dicts (``dict[str, Any]``) so that a set can be added on
        the command line (``+align.gold.NAME={format:xlwa,path:...}``), which OmegaConf refuses
        for a dict of dataclasses; the fields are checked here instead.
        """
        known = {f.name for f in fields(cls)}
        out = {}
        for name, gold in sets.items():
            if isinstance(gold, cls):
                out[name] = gold
                continue
            gold = dict(gold)
            unknown = sorted(set(gold) - known)
            if unknown or "path" not in gold:
                problem = f"unknown keys {unknown}" if unknown else "no path"
                raise UserError(
                    f"{where}.{name}: {problem}; a gold set has {sorted(known)}, e.g. "
                    f"+{where}.{name}={{format:xlwa,path:/data/test.tsv}}"
                )
            out[name] = cls(**gold)
        return out


@dataclass
class GoldSet:
    """Sentence pairs (words split on spaces) and their (sure, possible) links (source i,
    target j); ``gold`` None: pairs to align, with nothing to score them against."""

    name: str
    sources: list[str]
    targets: list[str]
    gold: Gold | None

    def __len__(self) -> int:
        return len(self.sources)

    @property
    def words(self) -> list[tuple[list[str], list[str]]]:
        """Per pair, its (source, target) words, as links count them."""
        return [(s.split(), t.split()) for s, t in zip(self.sources, self.targets, strict=True)]

    def reversed(self) -> GoldSet:
        """The same pairs for a model translating the other way: sides and links swapped."""
        gold = None if self.gold is None else swap(self.gold)
        return GoldSet(self.name, self.targets, self.sources, gold)

    def foldable(self, tokenizer, max_pieces: int | None = None) -> tuple[GoldSet, int]:
        """The pairs whose pieces fold back into their words (the others cannot be scored
        word by word) and, with ``max_pieces``, fit in that many pieces with EOS on both sides;
        and how many were left out.

        Args:
            tokenizer: a ``transformer_mt.data.tokenizer.Tokenizer`` (its ``sp`` and ``encode``).
        """
        starts = word_starts(tokenizer.sp)
        limit = max_pieces if max_pieces is not None else float("inf")
        keep = [
            n
            for n, (src, tgt) in enumerate(zip(self.sources, self.targets))
            if all(
                folds(ids + [EOS_ID], text, starts) and len(ids) + 1 <= limit
                for ids, text in zip(tokenizer.encode([src, tgt]), (src, tgt))
            )
        ]
        return self.picked(keep), len(self) - len(keep)

    def picked(self, rows: Iterable[int], name: str | None = None) -> GoldSet:
        """The pairs at ``rows``, in that order (their links with them)."""
        rows = list(rows)
        gold = None if self.gold is None else [self.gold[n] for n in rows]
        sources, targets = [self.sources[n] for n in rows], [self.targets[n] for n in rows]
        return GoldSet(name or self.name, sources, targets, gold)

    def joined(self, parts: int, max_words: int = 10) -> GoldSet:
        """Long pairs made of short ones: the pairs whose source has at most ``max_words`` words,
        taken ``parts`` at a time in order and joined by a space on both sides (a left-over
        group of fewer is dropped), each part's links moved by the words before it.

        Scored beside the short pairs themselves (``parts=1``), it tells length apart from
        content: the joined pairs are as long as natural long sentences but hold only what
        the short ones hold, so a rise in AER on them is the length alone.
        """
        if parts < 1 or max_words < 1:
            raise UserError(
                f"joining gold pairs needs parts >= 1 and max_words >= 1, got {parts}, {max_words}"
            )
        short = [n for n, s in enumerate(self.sources) if len(s.split()) <= max_words]
        groups = [short[k : k + parts] for k in range(0, len(short) - parts + 1, parts)]
        sources, targets, gold = [], [], []
        for group in groups:
            src_words = tgt_words = 0
            sure: Links = set()
            possible: Links = set()
            for n in group:
                moved = [
                    {(i + src_words, j + tgt_words) for i, j in links} for links in self.gold[n]
                ]
                sure |= moved[0]
                possible |= moved[1]
                src_words += len(self.sources[n].split())
                tgt_words += len(self.targets[n].split())
            sources.append(" ".join(self.sources[n] for n in group))
            targets.append(" ".join(self.targets[n] for n in group))
            gold.append((sure, possible))
        name = f"{self.name} <={max_words} words" + (f" x{parts}" if parts > 1 else "")
        return GoldSet(name, sources, targets, gold)


GOLD_FORMATS = ("graca", "xlwa", "pharaoh")


def load_gold_set(
    name: str, cfg, src_lang: str, tgt_lang: str, where: str | None = None
) -> GoldSet:
    """Read ``align.gold.<name>`` (a ``GoldSetConfig``) for a ``src_lang`` -> ``tgt_lang`` model.

    Links outside their sentences are left out with a warning each (``clean_gold``); ``where``
    names the set in messages (default ``align.gold.<name>``)."""
    where = where or f"align.gold.{name}"
    path = Path(cfg.path).expanduser()
    if not path.exists():
        raise UserError(f"{where}: {path} does not exist")
    if cfg.format in ("graca", "xlwa") and "en" not in (src_lang, tgt_lang):
        raise UserError(f"{where}: {cfg.format} pairs English with another language")
    english_source = src_lang == "en"
    if cfg.format == "graca":
        other = tgt_lang if english_source else src_lang
        english = read_tagged_sentences(path / "test.en")
        foreign = read_tagged_sentences(path / f"test.{other}")
        gold = read_gold(path / "alignment", one_indexed=True, reverse=not english_source)
    elif cfg.format == "xlwa":
        english, foreign, gold = read_xlwa(path, reverse=not english_source)
    else:
        if cfg.src is None or cfg.tgt is None:
            raise UserError(f"{where}: format pharaoh needs src and tgt sentence files")
        sources = read_sentences(Path(cfg.src).expanduser())
        targets = read_sentences(Path(cfg.tgt).expanduser())
        gold = read_gold(path, cfg.one_indexed, cfg.reverse)
        english = foreign = None
    if english is not None:
        sources, targets = (english, foreign) if english_source else (foreign, english)
    if not (len(sources) == len(targets) == len(gold)):
        raise UserError(
            f"{where}: {len(sources)} source sentences, {len(targets)} target "
            f"sentences and {len(gold)} lines of links"
        )
    gold, warnings = clean_gold(gold, sources, targets, path)
    for warning in warnings:
        log.warning("warning: %s", warning)
    return GoldSet(name, sources, targets, check_sure(gold, f"{where} ({path})"))


# The gold sets of the shared data folder ($TRANSFORMER_MT_DATA), by name: (format, path, and
# for a Pharaoh set its languages, sentence files and links file, links first-second)
SHARED_GOLD_SETS = {
    "graca": ("graca", "word_alignment_gold_esen_graca/orig"),
    "xlwa": ("xlwa", "word_alignment_gold_esen_xlwa/orig/test.tsv"),
    "xlwa_dev": ("xlwa", "word_alignment_gold_esen_xlwa/orig/dev.tsv"),
    # 151 Europarl pairs (Lambert et al. 2005), many past 30 words: for development choices only
    "epps_dev": (
        "pharaoh",
        "word_alignment_gold_esen_epps_dev",
        "en",
        "es",
        "en.txt",
        "es.txt",
        "gold.pharaoh",
    ),
    "bicici": (
        "pharaoh",
        "word_alignment_gold_deen_bicici",
        "de",
        "en",
        "test.de",
        "test.en",
        "de-en.wa",
    ),
}


DEV_SETS = ("xlwa_dev", "epps_dev")  # the shared sets for development choices; the rest are tests


def shared_gold_set(name: str, folder: Path, src_lang: str, tgt_lang: str) -> GoldSet:
    """A gold set of ``SHARED_GOLD_SETS`` under ``folder``, for a ``src_lang`` -> ``tgt_lang``
    model (a Pharaoh set's sides and links turned round as needed)."""
    fmt, rel, *pharaoh = SHARED_GOLD_SETS[name]
    if not pharaoh:
        return load_gold_set(name, GoldSetConfig(fmt, str(folder / rel)), src_lang, tgt_lang)
    first, second, first_file, second_file, links = pharaoh
    if {src_lang, tgt_lang} != {first, second}:
        raise UserError(
            f"gold set {name} pairs {first} with {second}; the run is {src_lang}->{tgt_lang}"
        )
    files = [str(folder / rel / f) for f in (first_file, second_file)]
    reverse = src_lang != first
    src, tgt = files[::-1] if reverse else files
    spec = GoldSetConfig("pharaoh", str(folder / rel / links), src, tgt, reverse, False)
    return load_gold_set(name, spec, src_lang, tgt_lang)


def combined(sets: list[GoldSet]) -> GoldSet:
    """Several gold sets as one, their pairs one after the other: a corpus AER over it sums
    every set's links (a set with more links weighs more)."""
    if len(sets) == 1:
        return sets[0]
    gold = None if any(s.gold is None for s in sets) else [g for s in sets for g in s.gold]
    return GoldSet(
        "+".join(s.name for s in sets),
        [x for s in sets for x in s.sources],
        [x for s in sets for x in s.targets],
        gold,
    )
