"""From text in to text out: tokenize, batch by length, search, detokenize, keep the order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch.nn.utils.rnn import pad_sequence
from tqdm.auto import tqdm

from transformer_mt.decoding.beam import beam_search
from transformer_mt.decoding.config import DecodeConfig
from transformer_mt.decoding.greedy import greedy_decode
from transformer_mt.errors import UserError
from transformer_mt.model import Transformer
from transformer_mt.model.positions import fit_positions
from transformer_mt.model.vocab import EOS_ID, PAD_ID


class Tokenizer(Protocol):
    """What decoding needs of a tokenizer (``transformer_mt.data.tokenizer.Tokenizer`` is one)."""

    def encode(self, sentences: list[str]) -> list[list[int]]: ...

    def decode(self, ids: list[list[int]]) -> list[str]: ...


@dataclass(frozen=True)
class Translation:
    text: str
    tokens: list[int]  # piece ids, without BOS/EOS
    score: float  # length-normalised log-probability (beam search); 0.0 for greedy output


def source_ids(
    tokenizer: Tokenizer, sentences: list[str], max_positions: int, long_inputs: str = "truncate"
) -> list[list[int]]:
    """EOS-terminated piece ids that fit the model's positions (``fit_positions``).

    Args:
        long_inputs: "truncate" keeps the first pieces of a longer line, with one warning that
            counts such lines and names the first; "error" raises a UserError naming it.
    """
    if long_inputs not in ("truncate", "error"):
        raise UserError(f"long_inputs must be 'truncate' or 'error', got {long_inputs!r}")
    fitted = fit_positions(
        tokenizer.encode(sentences), max_positions, "source", error=long_inputs == "error"
    )
    return [ids + [EOS_ID] for ids in fitted]


@torch.no_grad()
def translate(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: list[str],
    cfg: DecodeConfig,
    n_best: int = 1,
    long_inputs: str = "truncate",
    progress: bool = False,
) -> list[list[Translation]]:
    """The ``n_best`` translations of every sentence, in input order.

    Sentences are sorted by length and decoded ``cfg.batch_size`` at a time, so little padding
    is computed. An empty (or blank) sentence translates to an empty string without decoding.
    """
    model.eval()
    device = next(model.parameters()).device
    ids = source_ids(tokenizer, sentences, model.cfg.max_positions, long_inputs)
    results: list[list[Translation]] = [[Translation("", [], 0.0)] for _ in sentences]
    todo = sorted((i for i, s in enumerate(sentences) if s.strip()), key=lambda i: len(ids[i]))
    bar = tqdm(total=len(todo), unit="sent", desc="translating", disable=not progress)
    for start in range(0, len(todo), cfg.batch_size):
        chunk = todo[start : start + cfg.batch_size]
        src = pad_sequence(
            [torch.tensor(ids[i]) for i in chunk], batch_first=True, padding_value=PAD_ID
        ).to(device)  # (b, S)
        if cfg.beam_size == 1 and n_best == 1:
            hyps = [
                [(tokens, 0.0)]
                for tokens in greedy_decode(
                    model, src, cfg.max_len_a, cfg.max_len_b, compile=cfg.compile
                )
            ]
        else:
            found = beam_search(
                model,
                src,
                cfg.beam_size,
                cfg.length_penalty,
                cfg.max_len_a,
                cfg.max_len_b,
                n_best=n_best,
                length_norm=cfg.length_norm,
                compile=cfg.compile,
            )
            hyps = [[(h.tokens, h.score) for h in hs] for hs in found]
        for i, options in zip(chunk, hyps):
            texts = tokenizer.decode([tokens for tokens, _ in options])
            results[i] = [
                Translation(t, tokens, score) for t, (tokens, score) in zip(texts, options)
            ]
        bar.update(len(chunk))
    bar.close()
    return results
