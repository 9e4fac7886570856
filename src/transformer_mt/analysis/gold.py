"""Gold word-alignment sets as one object: sentences, links, and their scores for a model.

``load_gold_set`` reads the formats of ``align.gold`` (Graca et al.'s markup, XL-WA's TSV, or
plain sentence files with Pharaoh/NAACL links) in the model's direction; ``gold_aer`` scores
one head (or each layer's heads averaged) on it, as training does at every validation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from transformer_mt.analysis.alignment import (
    Links,
    _swap,
    corpus_attention,
    drop_outside,
    read_gold,
    read_tagged_sentences,
    read_xlwa,
    score_layers,
)
from transformer_mt.errors import UserError


@dataclass
class GoldSet:
    """Sentence pairs (words split on spaces) and their (sure, possible) links (source i, target j)."""

    name: str
    sources: list[str]
    targets: list[str]
    gold: list[tuple[Links, Links]]

    def __len__(self) -> int:
        return len(self.sources)

    def reversed(self) -> GoldSet:
        """The same pairs for a model translating the other way: sides and links swapped."""
        return GoldSet(self.name, self.targets, self.sources, _swap(self.gold))

    def foldable(self, tokenizer) -> tuple[GoldSet, int]:
        """The pairs whose pieces fold back into their words (the others cannot be scored
        word by word), and how many were left out."""
        from transformer_mt.data.guided import piece_words, word_starts
        from transformer_mt.data.tokenizer import EOS_ID

        starts = word_starts(tokenizer.sp)
        keep = []
        for n, (src, tgt) in enumerate(zip(self.sources, self.targets)):
            ok = all(
                int(piece_words(ids + [EOS_ID], starts).max(initial=-1)) + 1 == len(text.split())
                for ids, text in zip(tokenizer.encode([src, tgt]), (src, tgt))
            )
            if ok:
                keep.append(n)
        kept = GoldSet(
            self.name,
            [self.sources[n] for n in keep],
            [self.targets[n] for n in keep],
            [self.gold[n] for n in keep],
        )
        return kept, len(self) - len(keep)


def load_gold_set(name: str, cfg, src_lang: str, tgt_lang: str) -> GoldSet:
    """Read ``align.gold.<name>`` (a ``GoldSetConfig``) for a ``src_lang`` -> ``tgt_lang`` model."""
    path = Path(cfg.path).expanduser()
    if not path.exists():
        raise UserError(f"align.gold.{name}: {path} does not exist")
    if cfg.format in ("graca", "xlwa") and "en" not in (src_lang, tgt_lang):
        raise UserError(f"align.gold.{name}: {cfg.format} pairs English with another language")
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
            raise UserError(f"align.gold.{name}: format pharaoh needs src and tgt sentence files")
        sources = Path(cfg.src).expanduser().read_text(encoding="utf-8").splitlines()
        targets = Path(cfg.tgt).expanduser().read_text(encoding="utf-8").splitlines()
        gold = read_gold(path, cfg.one_indexed, cfg.reverse)
        english = foreign = None
    if english is not None:
        sources, targets = (english, foreign) if english_source else (foreign, english)
    if not (len(sources) == len(targets) == len(gold)):
        raise UserError(
            f"align.gold.{name}: {len(sources)} source sentences, {len(targets)} target "
            f"sentences and {len(gold)} lines of links"
        )
    gold, _ = drop_outside(gold, sources, targets)
    return GoldSet(name, sources, targets, gold)


def gold_aer(
    model,
    tokenizer,
    gold: GoldSet,
    layer: int | None = None,
    head: int | None = None,
    full_context: bool = False,
    shift: bool = False,
) -> dict[str, float]:
    """AER (argmax reading) of one head (``layer``/``head``, 1-based) and of the best layer's
    heads averaged; the model is put in eval mode by the caller.

    Args:
        full_context: read the head with the whole target as context (a head trained with
            ``align.full_context``); the layers' means are read as the model predicts.
        shift: read the head's row for a target word where that word is the decoder's input
            (a head trained with ``align.shift``).

    Returns:
        ``{"head": ..., "best_layer": ..., "best_layer_aer": ...}`` (no "head" without one).
    """
    attention = corpus_attention(model, tokenizer, gold.sources, gold.targets)
    means = score_layers(attention, gold.gold)
    best = int(np.argmin([s.aer for s in means]))
    out = {"best_layer": float(best + 1), "best_layer_aer": means[best].aer}
    if layer is not None:
        if full_context:
            attention = corpus_attention(
                model, tokenizer, gold.sources, gold.targets, full_context=True
            )
        index = layer - 1 if layer > 0 else layer + len(means)
        out["head"] = score_layers(attention, gold.gold, shift=shift, head=head)[index].aer
    return out
