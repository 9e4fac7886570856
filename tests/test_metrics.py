import math

import pytest

from transformer_mt.metrics import (
    compound_split_bleu,
    corpus_bleu,
    corpus_chrf,
    tokenized_lowercase_bleu,
)


def test_identical_text_scores_100_with_signature() -> None:
    refs = ["the black cat sleeps at home", "a girl sings"]
    bleu = corpus_bleu(refs, refs)
    assert bleu.score == pytest.approx(100.0)
    assert (
        bleu.signature
        == "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" + bleu.signature.split(":")[-1]
    )
    assert corpus_chrf(refs, refs).score == pytest.approx(100.0)


def test_known_partial_score() -> None:
    # Hand-counted n-gram precisions 5/6, 4/5, 3/4, 2/3; same length, so BP = 1.
    hyp, ref = ["the black cat sleeps at house"], ["the black cat sleeps at home"]
    bleu = corpus_bleu(hyp, ref)
    assert bleu.score == pytest.approx(
        100 * (5 / 6 * 4 / 5 * 3 / 4 * 2 / 3) ** 0.25, abs=1e-6
    )  # 75.98
    assert bleu.text.startswith("BLEU = 75.98 83.3/80.0/75.0/66.7")


def test_mismatched_lengths_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        corpus_bleu(["a", "b"], ["a"])


def test_compound_split_bleu_by_hand() -> None:
    """The paper's EN-DE BLEU (tensor2tensor's get_ende_bleu.sh): Moses tokens ("groß." ->
    "groß ."), then "Auto-Haus" -> "Auto ##AT##-##AT## Haus", then BLEU on those tokens.

    hyp: Das Auto ##AT##-##AT## Haus ist groß .       (7 tokens)
    ref: Das Auto ##AT##-##AT## Haus ist sehr groß .  (8 tokens)
    n-gram matches 7/7, 5/6 (not "ist groß"), 3/5, 2/4; BP = exp(1 - 8/7).
    """
    hyp, ref = ["Das Auto-Haus ist groß."], ["Das Auto-Haus ist sehr groß."]
    paper = compound_split_bleu(hyp, ref, lang="de")
    expected = 100 * math.exp(1 - 8 / 7) * (7 / 7 * 5 / 6 * 3 / 5 * 2 / 4) ** 0.25  # 61.30
    assert paper.score == pytest.approx(expected, abs=1e-9)
    assert paper.text.startswith("BLEU = 61.30 100.0/83.3/60.0/50.0")
    assert "hyp_len = 7 ref_len = 8" in paper.text
    assert paper.signature.startswith("moses-tok+compound-split|") and "tok:none" in paper.signature
    # SacreBLEU's 13a keeps "Auto-Haus" one token: another figure, never to be confused
    assert corpus_bleu(hyp, ref).score == pytest.approx(40.94, abs=0.01)
    # a hyphen between any two non-spaces is split, numbers included: 2 ##AT##-##AT## 3
    assert compound_split_bleu(["von 2-3 Uhr"], ["von 2-3 Uhr"]).text.endswith(
        "hyp_len = 5 ref_len = 5)"
    )


def test_tokenized_lowercase_bleu_by_hand() -> None:
    """The Multi30k literature's BLEU: Moses tokens, lowercased, BLEU on those tokens.

    hyp: ein hund läuft über die wiese .        (7 tokens)
    ref: ein brauner hund läuft über die wiese . (8 tokens)
    n-gram matches 7/7, 5/6 (not "ein hund"), 4/5, 3/4; BP = exp(1 - 8/7).
    """
    hyp, ref = ["Ein Hund läuft über die Wiese."], ["ein brauner Hund läuft über die Wiese ."]
    score = tokenized_lowercase_bleu(hyp, ref, lang="de")
    expected = 100 * math.exp(1 - 8 / 7) * (7 / 7 * 5 / 6 * 4 / 5 * 3 / 4) ** 0.25
    assert score.score == pytest.approx(expected, abs=1e-9)
    assert "hyp_len = 7 ref_len = 8" in score.text
    assert score.signature.startswith("moses-tok+lc|") and "tok:none" in score.signature
    # cased 13a SacreBLEU counts "Ein"/"ein" apart: a lower figure on the same output
    assert corpus_bleu(hyp, ref).score < score.score


def test_a_multi30k_hypothesis_file_is_scored_both_ways_by_hand(tmp_path) -> None:
    """What the final evaluation and evaluate.py report for Multi30k: cased 13a SacreBLEU and the
    literature's Moses-tokenized lowercased BLEU, on one hypothesis file, both by hand.

    hyp: Ein Hund läuft über die Wiese .          (7 tokens either way)
    ref: ein brauner Hund läuft über die Wiese .  (8 tokens)
    SacreBLEU (cased: "Ein" is not "ein"): 6/7, 5/6, 4/5, 3/4.  Lowercased: 7/7, 5/6, 4/5, 3/4.
    """
    from transformer_mt.config import DataConfig
    from transformer_mt.scoring import score_translations

    hyp_file = tmp_path / "hyp.txt"
    hyp_file.write_text("Ein Hund läuft über die Wiese.\n", encoding="utf-8")
    hyps = hyp_file.read_text(encoding="utf-8").splitlines()
    refs = ["ein brauner Hund läuft über die Wiese ."]
    data = DataConfig(name="multi30k_en_de", src_lang="en", tgt_lang="de", cache_dir=str(tmp_path))
    scores, lines = score_translations(hyps, refs, data)
    brevity = math.exp(1 - 8 / 7)
    assert scores["bleu"] == round(100 * brevity * (6 / 7 * 5 / 6 * 4 / 5 * 3 / 4) ** 0.25, 2)
    assert scores["bleu_tokenized_lowercase"] == round(
        100 * brevity * (7 / 7 * 5 / 6 * 4 / 5 * 3 / 4) ** 0.25, 2
    )
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert any("Multi30k-comparable (Moses-tokenized, lowercased) BLEU" in line for line in lines)
    # another data set's target in German: the paper's compound-split BLEU, not the lowercased
    wmt = DataConfig(name="wmt14_en_de", src_lang="en", tgt_lang="de", cache_dir=str(tmp_path))
    other, _ = score_translations(hyps, refs, wmt)
    assert "bleu_tokenized_lowercase" not in other and "bleu_tokenized_compound_split" in other
