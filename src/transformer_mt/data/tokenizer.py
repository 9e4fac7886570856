"""Joint SentencePiece BPE (§5.1: "a shared source-target vocabulary").

Trained with the special ids of ``transformer_mt.model.vocab`` (pad 0, unk 1, BOS 2, EOS 3).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from transformer_mt.errors import UserError
from transformer_mt.model.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID


class Tokenizer:
    """A trained SentencePiece model with our fixed special ids."""

    def __init__(self, model_path: str | Path) -> None:
        self.path = Path(model_path)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.path))
        specials = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if specials != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(
                f"{self.path} has special ids pad/unk/bos/eos={specials}, expected "
                f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; train it with transformer_mt.data.tokenizer"
            )

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Piece ids of each text, without BOS/EOS."""
        return self.sp.encode(list(texts))

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Detokenized text; special ids are dropped."""
        return [self.sp.decode([i for i in seq if i > EOS_ID]) for seq in ids]

    def pieces(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        vocab_size: int,
        cache_dir: str | Path,
        input_sentence_size: int = 2_000_000,
        seed: int = 1234,
        fingerprint: str | None = None,
    ) -> Tokenizer:
        """Train (or reuse from ``cache_dir``) a BPE model on ``sentences``, both languages mixed.

        A seeded sample of at most ``input_sentence_size`` sentences is taken here (SentencePiece's
        own sampler has no seed), so the same corpus and settings always give the same model.
        The cache key is ``fingerprint`` (a cheap identity of the corpus, e.g. the data set's
        fingerprint) or, when None, a hash of the sampled text itself.
        """
        settings = {
            "vocab_size": vocab_size,
            "input_sentence_size": input_sentence_size,
            "seed": seed,
        }
        key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
        sample = None
        if fingerprint is None:
            sample = _reservoir(sentences, input_sentence_size, seed)
            key.update("\n".join(sample).encode())
        else:
            key.update(fingerprint.encode())
        path = Path(cache_dir) / f"spm_bpe{vocab_size}_{key.hexdigest()[:16]}.model"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            if sample is None:
                sample = _reservoir(sentences, input_sentence_size, seed)
            if not any(s.strip() for s in sample):  # SentencePiece would fail deep inside
                raise UserError(
                    f"all {len(sample)} sentences sampled for SentencePiece are empty; "
                    "check that the files hold text, one sentence per line"
                )
            tmp = path.with_suffix(".tmp")
            with open(tmp, "wb") as writer:
                spm.SentencePieceTrainer.train(
                    sentence_iterator=iter(sample),
                    model_writer=writer,
                    model_type="bpe",
                    vocab_size=vocab_size,
                    character_coverage=1.0,
                    pad_id=PAD_ID,
                    unk_id=UNK_ID,
                    bos_id=BOS_ID,
                    eos_id=EOS_ID,
                    hard_vocab_limit=False,  # a small corpus may support fewer pieces
                    num_threads=2,
                    minloglevel=2,
                )
            tmp.replace(path)  # atomic: a crash never leaves half a model behind
        return cls(path)


def _reservoir(sentences: Iterable[str], k: int, seed: int) -> list[str]:
    """A uniform sample of at most k items in one pass (Algorithm R), in input order."""
    rng = random.Random(seed)
    kept: list[tuple[int, str]] = []
    for n, s in enumerate(sentences):
        if n < k:
            kept.append((n, s))
        else:
            j = rng.randrange(n + 1)
            if j < k:
                kept[j] = (n, s)
    return [s for _, s in sorted(kept)]
