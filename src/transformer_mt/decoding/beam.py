"""Batched beam search with the GNMT length penalty (§6.1: beam 4, α = 0.6, max length |x| + 50).

Legend: B sentences, K beam size, V vocabulary, n sentences still being searched.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_mt.decoding.state import constrain_length, decoder_state, length_limits
from transformer_mt.model import Transformer
from transformer_mt.model.vocab import BOS_ID, EOS_ID


@dataclass(frozen=True)
class Hypothesis:
    """A finished translation."""

    tokens: list[int]  # without BOS and EOS
    logprob: float  # sum of the token log-probabilities, EOS included
    score: float  # logprob / length_penalty(len(tokens) + 1): what the search ranks by


LENGTH_NORMS = ("gnmt", "power")


def length_penalty(length: int | Tensor, alpha: float, norm: str = "gnmt") -> float | Tensor:
    """lp(Y), |Y| counting EOS; α = 0 means no normalisation.

    ``gnmt``: ((5 + |Y|) / 6)^α (Wu et al. 2016; the paper's α 0.6). ``power``: |Y|^α, what
    CTranslate2 and fairseq's ``lenpen`` divide by.
    """
    if norm == "gnmt":
        return ((5 + length) / 6) ** alpha
    if norm == "power":
        return length**alpha
    raise ValueError(f"unknown length normalisation {norm!r}: use gnmt or power")


@dataclass
class _Beams:
    """The live part of the search: n sentences x K beams."""

    sentence: Tensor  # (n,) index of each live sentence in the input batch
    # (n, k) summed log-probabilities of the live beams (k = 1 before the first step)
    scores: Tensor
    prefix: Tensor  # (n * k, t) BOS + tokens so far


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: Tensor,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    min_len: int = 0,
    n_best: int = 1,
    use_cache: bool = True,
    length_norm: str = "gnmt",
    compile: bool = False,
) -> list[list[Hypothesis]]:
    """The ``n_best`` best translations of every sentence, best first.

    Each step scores the K x V continuations of every sentence's K beams and takes the top 2K,
    so that beams ending in EOS never starve the beam: EOS candidates within the top K are
    finished (and never extended again), the best K others live on. A sentence stops once it
    has K finished hypotheses (early termination) or reaches its length limit, and then leaves
    the batch and the cache.

    Args:
        src: (B, S) padded, EOS-terminated source ids.
        alpha: the length penalty's α.
        length_norm: ``gnmt`` or ``power`` (see ``length_penalty``): how finished
            hypotheses are ranked.
        max_len_a, max_len_b, min_len, use_cache, compile: as in ``greedy_decode``.

    Returns:
        B lists of at most ``n_best`` hypotheses, sorted by score.
    """
    B, K = src.size(0), beam_size
    length_penalty(1, alpha, length_norm)  # refuses an unknown normalisation before any work
    if not 1 <= n_best <= K:
        raise ValueError(f"n_best={n_best} must be between 1 and the beam size {K}")
    limit = length_limits(src, max_len_a, max_len_b, model.cfg.max_positions)  # (B,)
    # The first step runs one row per sentence: all K beams would start from the same BOS and
    # compute the same thing (CTranslate2 does the same). The first reorder widens to K rows.
    state = decoder_state(model, src, use_cache, compile, int(limit.max()))
    beams = _Beams(
        torch.arange(B, device=src.device),
        torch.zeros((B, 1), device=src.device),
        torch.full((B, 1), BOS_ID, device=src.device),
    )
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    for step in range(int(limit.max()) + 1):
        k = beams.scores.size(1)  # live rows per sentence: 1, then K
        logprobs = state.step(beams.prefix)  # (n * k, V)
        logprobs = constrain_length(
            logprobs, step, min_len, limit[beams.sentence].repeat_interleave(k)
        )
        top_scores, parent, token = _top_candidates(beams.scores, logprobs, K)  # 3 x (n, 2K)
        _finish(beams, top_scores[:, :K], parent[:, :K], token[:, :K], alpha, length_norm, finished)
        live = _select_live(beams, top_scores, parent, token, K, step, limit, finished)
        if live is None:
            break
        # a sentence finished (the first step's rows becoming K beams each changes none)
        sources_changed = live[0].sentence.numel() < beams.sentence.numel()
        beams, rows = live
        state.reorder(rows, sources_changed, expand=K)
    return [sorted(hyps, key=lambda h: -h.score)[:n_best] for hyps in finished]


def _top_candidates(scores: Tensor, logprobs: Tensor, K: int) -> tuple[Tensor, Tensor, Tensor]:
    """Top 2K continuations per sentence of its k live beams: summed scores, parents, tokens."""
    (n, k), V = scores.shape, logprobs.size(-1)
    candidates = (scores[:, :, None] + logprobs.view(n, k, V)).view(n, k * V)  # (n, k * V)
    need = min(2 * K, K * V)
    if k * V < need:  # the first step (k = 1) over fewer than 2K tokens: dead fillers (-inf)
        candidates = torch.nn.functional.pad(candidates, (0, need - k * V), value=-torch.inf)
    top_scores, flat = candidates.topk(need, dim=1)  # (n, 2K)
    parent = torch.where(flat < k * V, flat // V, 0)  # a filler extends (dead) beam 0
    return top_scores, parent, flat % V


def _finish(
    beams: _Beams,
    scores: Tensor,
    parent: Tensor,
    token: Tensor,
    alpha: float,
    length_norm: str,
    finished: list,
) -> None:
    """Record the EOS candidates among the top K as finished hypotheses (at most K per sentence)."""
    K, k = scores.size(1), beams.scores.size(1)
    ends = (token == EOS_ID) & torch.isfinite(scores)  # (n, K)
    for r, c in ends.nonzero().tolist():
        hyps = finished[int(beams.sentence[r])]
        if len(hyps) < K:
            tokens = beams.prefix[r * k + int(parent[r, c]), 1:].tolist()
            logprob = float(scores[r, c])
            hyps.append(
                Hypothesis(
                    tokens, logprob, logprob / length_penalty(len(tokens) + 1, alpha, length_norm)
                )
            )


def _select_live(
    beams: _Beams,
    top_scores: Tensor,
    parent: Tensor,
    token: Tensor,
    K: int,
    step: int,
    limit: Tensor,
    finished: list,
) -> tuple[_Beams, Tensor] | None:
    """The best K non-EOS candidates of every sentence that is not done, and the cache rows they extend."""
    order = torch.arange(top_scores.size(1), device=top_scores.device).expand_as(top_scores)
    rank = torch.where(token == EOS_ID, torch.inf, order.float())  # EOS candidates never live on
    pick = rank.topk(K, dim=1, largest=False).indices  # (n, K)
    scores, parent, token = (
        top_scores.gather(1, pick),
        parent.gather(1, pick),
        token.gather(1, pick),
    )
    done = torch.tensor(
        [len(finished[s]) >= K for s in beams.sentence.tolist()], device=scores.device
    )
    done |= step >= limit[beams.sentence]
    keep = (~done).nonzero().squeeze(1)  # (n',)
    if keep.numel() == 0:
        return None
    k = beams.scores.size(1)
    rows = (keep[:, None] * k + parent[keep]).view(-1)  # (n' * K,) parents in the current batch
    prefix = torch.cat([beams.prefix[rows], token[keep].view(-1, 1)], dim=1)
    return _Beams(beams.sentence[keep], scores[keep], prefix), rows
