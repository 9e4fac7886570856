"""Word alignments of a training corpus by eflomal (Östling & Tiedemann 2016), cached on disk.

eflomal aligns both directions at once; their grow-diag-final-and symmetrization is written
beside them, so every choice of ``data.eflomal_links`` is on disk after one run. The cache key
is the caller's (a hash of the training split's text): the same pairs are never aligned twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from transformer_mt.align.links import format_pharaoh, read_pharaoh, symmetrize
from transformer_mt.errors import UserError

log = logging.getLogger(__name__)

EFLOMAL_LINKS = ("gdfa", "forward", "reverse")  # data.eflomal_links: which file is trained on


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
    text: Callable[[], tuple[Sequence[str], Sequence[str]]], folder: Path, key: str
) -> dict[str, Path]:
    """Align the pairs with eflomal unless ``folder`` already holds ``key``'s links.

    Args:
        text: returns (sources, targets); called only when the links are not cached, so a
            cached corpus is never read into memory (36M pairs for WMT14 EN-FR).

    The text is lowercased and split on whitespace, as the gold sets count words.

    Returns:
        ``cached_links(folder, key)``: one line of source-target links per pair.

    Raises:
        UserError: when eflomal is not installed.
    """
    paths = cached_links(folder, key)
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
    src = [" ".join(s.lower().split()) for s in sources]
    tgt = [" ".join(t.lower().split()) for t in targets]
    log.info("aligning %d training pairs with eflomal (cached in %s)", len(src), folder)
    fwd, rev = (paths["gdfa"].with_suffix(suffix) for suffix in (".fwd", ".rev"))
    eflomal.Aligner().align(src, tgt, links_filename_fwd=str(fwd), links_filename_rev=str(rev))
    tmp = paths["gdfa"].with_suffix(".tmp")
    with open(fwd) as f, open(rev) as r, open(tmp, "w") as out:
        for forward, backward in zip(f, r, strict=True):
            links = symmetrize(read_pharaoh(forward)[0], read_pharaoh(backward)[0])
            out.write(format_pharaoh(links) + "\n")
    fwd.replace(paths["forward"])  # the cache is whole once all three files exist
    rev.replace(paths["reverse"])
    tmp.replace(paths["gdfa"])
    return paths
