"""Corpus BLEU and chrF through SacreBLEU, on detokenized text, always with their signatures."""

from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF


@dataclass(frozen=True)
class Score:
    name: str
    score: float
    signature: str
    text: str  # sacrebleu's full line, e.g. "BLEU = 34.2 65.1/40.3/27.0/18.6 (BP = ...)"


def corpus_bleu(hypotheses: list[str], references: list[str], tokenize: str = "13a") -> Score:
    """SacreBLEU (default: 13a tokenization, cased) of one reference per hypothesis."""
    _check(hypotheses, references)
    metric = BLEU(tokenize=tokenize)
    result = metric.corpus_score(hypotheses, [references])
    return Score("bleu", result.score, str(metric.get_signature()), str(result))


def corpus_chrf(hypotheses: list[str], references: list[str]) -> Score:
    _check(hypotheses, references)
    metric = CHRF()
    result = metric.corpus_score(hypotheses, [references])
    return Score("chrf", result.score, str(metric.get_signature()), str(result))


def _check(hypotheses: list[str], references: list[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses for {len(references)} references; they must pair up"
        )
