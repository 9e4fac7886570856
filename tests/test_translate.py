"""Text in, text out: order, empty lines, long inputs, n-best."""

from __future__ import annotations

import logging

import pytest
import torch

from transformer_mt import Transformer, TransformerConfig, translate
from transformer_mt.config import DecodeConfig
from transformer_mt.data import demo_corpus
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import UserError


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    pairs = demo_corpus.generate(3, {"train": 1500})["train"]
    return Tokenizer.train(
        [s for p in pairs for s in (p.src, p.tgt)], 300, tmp_path_factory.mktemp("spm")
    )


@pytest.fixture(scope="module")
def model(tokenizer: Tokenizer) -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(
        n_layers=1,
        d_model=16,
        d_ff=32,
        n_heads=2,
        vocab_size=tokenizer.vocab_size,
        max_positions=12,
    )
    return Transformer(cfg).eval()


SENTENCES = ["el gato negro duerme", "", "la casa", "   ", "los perros comen en casa hoy"]


@pytest.mark.parametrize("beam", [1, 3])
def test_order_and_empty_lines_are_kept(model, tokenizer, beam: int) -> None:
    cfg = DecodeConfig(beam_size=beam, max_len_b=3, batch_size=2)
    out = translate(model, tokenizer, SENTENCES, cfg)
    assert len(out) == len(SENTENCES)
    assert out[1][0].text == "" and out[3][0].text == ""
    for sentence, result in zip(SENTENCES, out):  # each one as if translated alone
        if sentence.strip():
            assert result[0].tokens == translate(model, tokenizer, [sentence], cfg)[0][0].tokens


def test_n_best_lists(model, tokenizer) -> None:
    out = translate(
        model, tokenizer, SENTENCES[:1], DecodeConfig(beam_size=3, max_len_b=3), n_best=3
    )
    assert len(out[0]) == 3 and out[0][0].score >= out[0][1].score >= out[0][2].score


def test_long_input_is_truncated_with_a_warning_or_refused(model, tokenizer, caplog) -> None:
    long = " ".join(["el gato negro duerme en casa"] * 3)  # more pieces than max_positions=12
    with caplog.at_level(logging.WARNING):
        out = translate(model, tokenizer, ["la casa", long], DecodeConfig(max_len_b=2))
    assert len(out) == 2
    assert "1 source(s) of 2 longer than the model reads (max_positions=12" in caplog.text
    assert "the first is line 2 " in caplog.text
    with pytest.raises(UserError, match=r"the first is line 2 \(\d+ pieces\): shorten or split"):
        translate(
            model, tokenizer, ["la casa", long], DecodeConfig(max_len_b=2), long_inputs="error"
        )
