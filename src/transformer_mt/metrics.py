"""Corpus BLEU and chrF through SacreBLEU, on detokenized text, always with their signatures."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF
from sacremoses import MosesTokenizer


@dataclass(frozen=True)
class Score:
    name: str
    score: float
    signature: str
    text: str  # sacrebleu's full line, e.g. "BLEU = 34.2 65.1/40.3/27.0/18.6 (BP = ...)"
    length_ratio: float | None = None  # BLEU: output / reference length in tokens (BP's input)


def corpus_bleu(hypotheses: list[str], references: list[str], tokenize: str = "13a") -> Score:
    """SacreBLEU (default: 13a tokenization, cased) of one reference per hypothesis."""
    _check(hypotheses, references)
    metric = BLEU(tokenize=tokenize)
    result = metric.corpus_score(hypotheses, [references])
    ratio = result.sys_len / max(result.ref_len, 1)
    return Score("bleu", result.score, str(metric.get_signature()), str(result), ratio)


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


def compound_split_bleu(hypotheses: list[str], references: list[str], lang: str = "de") -> Score:
    """The paper's kind of BLEU: Moses-tokenized text with hyphenated compounds split, no further tokenization.

    This reproduces tensor2tensor's ``get_ende_bleu.sh`` (Moses ``tokenizer.perl``, then
    ``a-b`` -> ``a ##AT##-##AT## b``, then ``multi-bleu.perl``), which is how Vaswani et al.
    scored EN-DE. It reads about 0.7-1.5 higher than SacreBLEU on the same output and is not
    comparable with SacreBLEU figures: report it beside them, never instead.
    """
    return _moses_bleu(
        hypotheses,
        references,
        lang,
        lambda tokens: re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", tokens),
        "bleu_compound_split",
        "moses-tok+compound-split",
    )


def tokenized_lowercase_bleu(hypotheses: list[str], references: list[str], lang: str) -> Score:
    """The BLEU of the Multi30k literature: ``multi-bleu.perl -lc`` on Moses-tokenized text.

    Lowercased and tokenized, it reads higher than SacreBLEU's cased 13a on the same output and
    is not comparable with it: report it beside SacreBLEU, never instead.
    """
    return _moses_bleu(
        hypotheses, references, lang, str.lower, "bleu_tokenized_lowercase", "moses-tok+lc"
    )


def _moses_bleu(
    hypotheses: list[str],
    references: list[str],
    lang: str,
    then: Callable[[str], str],
    name: str,
    tag: str,
) -> Score:
    """BLEU on Moses-tokenized text, each line passed through ``then`` (``multi-bleu.perl``'s
    way of counting); the signature starts with ``tag``."""
    _check(hypotheses, references)
    moses = MosesTokenizer(lang=lang)

    def prepare(text: str) -> str:
        return then(moses.tokenize(text, return_str=True, escape=False))

    metric = BLEU(tokenize="none", force=True)
    result = metric.corpus_score(
        [prepare(h) for h in hypotheses], [[prepare(r) for r in references]]
    )
    return Score(name, result.score, f"{tag}|{metric.get_signature()}", str(result))


def literature_bleus(data_name: str, tgt_lang: str) -> dict[str, Callable[..., Score]]:
    """The tokenized BLEUs a data set's literature reports beside SacreBLEU, by their key in
    scores and logs: the paper's compound-split BLEU for a German target (its Table 2), the
    lowercased BLEU for Multi30k. Each is called as ``bleu(hypotheses, references, lang=...)``."""
    found: dict[str, Callable[..., Score]] = {}
    if tgt_lang == "de":
        found["bleu_tokenized_compound_split"] = compound_split_bleu
    if data_name.startswith("multi30k"):
        found["bleu_tokenized_lowercase"] = tokenized_lowercase_bleu
    return found
