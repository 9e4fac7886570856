import pytest

from transformer_mt.metrics import corpus_bleu, corpus_chrf


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
