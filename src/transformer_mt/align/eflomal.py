"""Word alignments of a training corpus by eflomal (Östling & Tiedemann 2016), cached on disk.

eflomal aligns both directions at once; their grow-diag-final-and symmetrization (what guided
alignment learns from) is written beside them (what benchmarks/alignment_aer.py scores). The cache key
is the caller's (a hash of the training split's text): the same pairs are never aligned twice.

A word is what the model's alignments count: a whitespace token of the text. Raw text sticks
punctuation to its words ("casa." beside "casa"), which splits one word's counts over several
types; with ``tokenize`` each word is cut by Moses's tokenizer (sacremoses) before eflomal sees
it, as aligners are usually run, and the links are mapped back onto the words
(benchmarks/alignment_aer.py --eflomal-tokenize moses: the stronger baseline).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from pathlib import Path

from sacremoses import MosesTokenizer
from tqdm.auto import tqdm

from transformer_mt.align.links import Links, format_pharaoh, read_pharaoh, symmetrize
from transformer_mt.errors import UserError

log = logging.getLogger(__name__)

EFLOMAL_LINKS = ("gdfa", "forward", "reverse")  # the cached files of one corpus
EFLOMAL_TOKENIZE = ("moses", "none")  # how words are cut for eflomal


class WordPieces:
    """Lowercased tokens of a text's whitespace words, and the word each token came from.

    Each word is cut alone (``Sr.`` stays whole, ``casa.`` becomes ``casa .``), so the tokens of
    word n are never shared with word n+1 and a token's link is its word's link.
    """

    def __init__(self, lang: str | None):
        """``lang``: Moses's rules for that language (any code: unknown ones get the generic
        rules); None keeps every word whole."""
        if lang is None:
            self._cut = lambda word: (word,)
        else:
            moses = MosesTokenizer(lang=lang)
            self._cut = lru_cache(maxsize=1 << 20)(
                lambda word: tuple(moses.tokenize(word, escape=False)) or (word,)
            )

    def __call__(self, text: str) -> tuple[list[str], list[int]]:
        """``"Vivo en casa."`` (es) -> (["vivo", "en", "casa", "."], [0, 1, 2, 2])."""
        tokens: list[str] = []
        owners: list[int] = []
        for n, word in enumerate(text.split()):
            cut = self._cut(word)
            tokens += (token.lower() for token in cut)
            owners += [n] * len(cut)
        return tokens, owners


def word_links(
    links: Links,
    src: tuple[list[str], list[int]],
    tgt: tuple[list[str], list[int]],
    one_per: int | None = None,
) -> Links:
    """Token links (i, j) as links between the words the tokens came from.

    Args:
        src, tgt: ``WordPieces`` of the two sentences (tokens, owner word of each token).
        one_per: 1 keeps each target word to the links of one of its tokens (0: each source
            word), the longest linked one ("casa" over "."): a directional alignment stays
            one link per word on its side. None keeps every link (the union).
    """
    if one_per is not None:
        side = (src, tgt)[one_per]
        best: dict[int, int] = {}  # word -> its chosen token
        for link in links:
            token = link[one_per]
            word = side[1][token]
            if word not in best or len(side[0][token]) > len(side[0][best[word]]):
                best[word] = token
        links = {link for link in links if best[side[1][link[one_per]]] == link[one_per]}
    return {(src[1][i], tgt[1][j]) for i, j in links}


def corpus_key(sources: Iterable[str], targets: Iterable[str]) -> str:
    """A cache key for ``align_corpus``: a hash of the text, the same pairs in the same order
    giving the same key (the sides and every sentence length-prefixed, so no shift of a word
    between sentences or sides goes unseen)."""
    digest = hashlib.sha256()
    for side, texts in (("src", sources), ("tgt", targets)):
        digest.update(f"{side}\0".encode())
        for text in texts:
            data = text.encode()
            digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()[:16]


def cached_links(folder: Path, key: str) -> dict[str, Path]:
    """The three Pharaoh files of one corpus, by ``EFLOMAL_LINKS`` name (they may not exist yet)."""
    return {links: Path(folder) / f"eflomal_{links}_{key}.pharaoh" for links in EFLOMAL_LINKS}


def align_corpus(
    text: Callable[[], tuple[Sequence[str], Sequence[str]]],
    folder: Path,
    key: str,
    tokenize: tuple[str, str] | None = None,
) -> dict[str, Path]:
    """Align the pairs with eflomal unless ``folder`` already holds ``key``'s links.

    Args:
        text: returns (sources, targets); called only when the links are not cached, so a
            cached corpus is never read into memory (36M pairs for WMT14 EN-FR).
        tokenize: (source language, target language): each word is cut by Moses's tokenizer
            for eflomal (``WordPieces``) and the links mapped back onto the words; the files
            are then ``key-moses``'s. None: the whitespace words as they are.

    The text is lowercased and split on whitespace, as the gold sets count words.

    Returns:
        ``cached_links(folder, key)``: one line of source-target links per pair, between
        whitespace words of the text whichever ``tokenize``.

    Raises:
        UserError: when eflomal is not installed.
    """
    paths = cached_links(folder, key if tokenize is None else f"{key}-moses")
    if all(path.exists() for path in paths.values()):
        return paths
    try:
        import eflomal  # an optional extra: pip install -e ".[align]"
    except ImportError:
        raise UserError(
            'data.alignments=eflomal needs the eflomal aligner: pip install -e ".[align]"'
        ) from None
    folder.mkdir(parents=True, exist_ok=True)
    sources, targets = text()
    cut_src, cut_tgt = (WordPieces(lang) for lang in (tokenize or (None, None)))
    how = "Moses-tokenized words" if tokenize else "words"

    def lines(texts: Sequence[str], cut: WordPieces, side: str) -> list[str]:
        what = f"{side} {how} for eflomal"
        return [" ".join(cut(t)[0]) for t in tqdm(texts, desc=what, mininterval=5)]

    src, tgt = lines(sources, cut_src, "source"), lines(targets, cut_tgt, "target")
    log.info("aligning %d training pairs with eflomal (cached in %s)", len(src), folder)
    fwd, rev = (paths["gdfa"].with_suffix(suffix) for suffix in (".fwd", ".rev"))
    eflomal.Aligner().align(src, tgt, links_filename_fwd=str(fwd), links_filename_rev=str(rev))
    del src, tgt
    tmp = {name: path.with_suffix(".tmp") for name, path in paths.items()}
    with (
        open(fwd) as f,
        open(rev) as r,
        open(tmp["gdfa"], "w") as out,
        open(tmp["forward"], "w") as out_f,
        open(tmp["reverse"], "w") as out_r,
    ):
        for forward, backward, s, t in zip(f, r, sources, targets, strict=True):
            forward, backward = read_pharaoh(forward)[0], read_pharaoh(backward)[0]
            words = cut_src(s), cut_tgt(t)
            # symmetrized on the tokens, as eflomal aligned them; then onto the words
            out.write(format_pharaoh(word_links(symmetrize(forward, backward), *words)) + "\n")
            out_f.write(format_pharaoh(word_links(forward, *words, one_per=1)) + "\n")
            out_r.write(format_pharaoh(word_links(backward, *words, one_per=0)) + "\n")
    fwd.unlink()
    rev.unlink()
    tmp["forward"].replace(paths["forward"])  # the cache is whole once all three files exist
    tmp["reverse"].replace(paths["reverse"])
    tmp["gdfa"].replace(paths["gdfa"])
    return paths


def align_beside(
    sources: list[str],
    targets: list[str],
    train: tuple[Sequence[str], Sequence[str]],
    cache: Path,
    tokenize: tuple[str, str] | None = None,
) -> dict[str, list[Links]]:
    """eflomal's links of some pairs (a gold set's), aligned together with training pairs as
    an unsupervised aligner is evaluated: ``forward``, ``reverse`` and their ``gdfa``, cached
    under ``cache/alignments`` by the text. A training pair equal to one of them is given once."""
    known = set(zip(sources, targets))
    kept = [(s, t) for s, t in zip(*train) if (s, t) not in known]
    src, tgt = list(sources) + [s for s, _ in kept], list(targets) + [t for _, t in kept]
    key = f"benchmark_{corpus_key(src, tgt)}"
    paths = align_corpus(lambda: (src, tgt), cache / "alignments", key, tokenize=tokenize)
    return {
        k: [
            read_pharaoh(line)[0]
            for line in Path(paths[k]).read_text().splitlines()[: len(sources)]
        ]
        for k in EFLOMAL_LINKS
    }
