"""Hugging Face Transformers (issue #53): the exported MarianMTModel computes our logits, decodes
our translations and tokenizes as we do; what it cannot express is refused."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
import torch
from omegaconf import OmegaConf

from transformer_mt import Transformer
from transformer_mt.errors import UserError
from transformer_mt.model.config import TransformerConfig
from transformer_mt.model.vocab import BOS_ID, EOS_ID, PAD_ID

from .scripts import run_script

transformers = pytest.importorskip("transformers", reason='pip install -e ".[hf]"')


def _logits_agree(model: Transformer, seed: int = 0) -> float:
    """The largest difference between our logits and the exported model's, on padded batches."""
    from transformer_mt.deploy.hf import to_marian

    marian = to_marian(model.eval())
    gen = torch.Generator().manual_seed(seed)
    V = model.cfg.vocab_size
    src = torch.randint(4, V, (3, 9), generator=gen)
    src[:, -1] = EOS_ID
    src[1, 6:], src[1, 5] = PAD_ID, EOS_ID  # a shorter source, padded on the right
    tgt_in = torch.randint(4, V, (3, 7), generator=gen)
    tgt_in[:, 0] = BOS_ID
    with torch.no_grad():
        ours = model(src, tgt_in)
        theirs = marian(
            input_ids=src, attention_mask=(src != PAD_ID).long(), decoder_input_ids=tgt_in
        ).logits
    return float((ours - theirs).abs().max())


def test_a_random_base_shaped_model_exports_to_the_same_logits() -> None:
    torch.manual_seed(0)
    cfg = TransformerConfig(name="base", vocab_size=500, max_positions=64)  # d 512, 6 + 6, h 8
    model = Transformer(cfg)
    for p in model.parameters():  # biases and norms away from their initial 0 / 1
        p.data.add_(0.02 * torch.randn_like(p))
    assert _logits_agree(model) < 1e-4


def test_the_position_permutation_turns_our_sinusoids_into_marians() -> None:
    from transformer_mt.deploy.hf import position_permutation
    from transformer_mt.model.embeddings import sinusoidal_table

    ours = sinusoidal_table(50, 16)
    marian = transformers.MarianMTModel(
        transformers.MarianConfig(
            d_model=16,
            max_position_embeddings=50,
            vocab_size=10,
            pad_token_id=0,
            decoder_start_token_id=2,
            eos_token_id=3,
        )
    ).model.encoder.embed_positions
    marian_table = marian.create_weight() if hasattr(marian, "create_weight") else marian.weight
    assert torch.allclose(ours[:, position_permutation(16)], marian_table, atol=1e-6)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"norm_first": True}, "model.norm_first=true: MarianMTModel is post-LN only"),
        ({"positional": "learned"}, "model.positional=learned: MarianMTModel's positions"),
        ({"d_k": 4}, r"model.d_k=4 differs from d_model/h=8"),
        ({"tie_embeddings": False}, "model.tie_embeddings=false"),
    ],
)
def test_what_transformers_cannot_express_is_refused(tiny_cfg, change, message) -> None:
    from transformer_mt.deploy.hf import to_marian

    model = Transformer(replace(tiny_cfg, vocab_size=20, **change))
    with pytest.raises(UserError, match=f"cannot export to Transformers exactly: {message}"):
        to_marian(model)


@pytest.mark.slow  # trains the shared demo model and runs the command line
def test_exported_demo_model_decodes_and_tokenizes_as_ours(demo_run, tmp_path) -> None:
    from transformer_mt.checkpoint import load_model, run_data_config
    from transformer_mt.data.sources import demo_files
    from transformer_mt.decoding import DecodeConfig, translate
    from transformer_mt.decoding.state import length_limits

    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "stale.bin").write_bytes(b"an earlier export's")
    export = ["export_hf.py", demo_run, "--out", tmp_path / "hf", "--license", "cc-by-4.0"]
    refused = run_script(*export)
    assert refused.returncode == 2 and "holds files already: pass --overwrite" in refused.stderr
    done = run_script(*export, "--repo-id", "someone/demo-es-en", "--overwrite")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "hf"
    assert not (out / "stale.bin").exists()
    model, tokenizer, _ = load_model(demo_run)
    marian = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    with open(demo_files(run_data_config(demo_run))["test"], encoding="utf-8") as f:
        sources = [json.loads(line)["src"] for _, line in zip(range(200), f)]
    # the tokenizer: our ids, EOS appended as our batches have it
    assert hf_tokenizer(sources)["input_ids"] == [
        ids + [EOS_ID] for ids in tokenizer.encode(sources)
    ]
    batch = hf_tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():  # the logits of one pair, through the Auto classes
        src, mask = batch["input_ids"][:1], batch["attention_mask"][:1]  # padded to the batch
        tgt_in = torch.tensor([[BOS_ID, *tokenizer.encode(["the black cat"])[0]]])
        theirs = marian(input_ids=src, attention_mask=mask, decoder_input_ids=tgt_in).logits
        difference = model(src, tgt_in) - theirs
    assert float(difference.abs().max()) < 1e-4

    # ours stops at |x| + 50 tokens, Transformers at one length for all: compare up to ours
    limits = length_limits(batch["input_ids"], 1.0, 50, model.cfg.max_positions).tolist()

    def generated(**options) -> list[list[int]]:
        with torch.no_grad():
            found = marian.generate(**batch, max_new_tokens=max(limits) + 1, **options)
        return [[t for t in row[1:].tolist() if t not in (PAD_ID, EOS_ID)] for row in found]

    # greedy: our greedy tokens on every sentence (a sentence that ran to our limit: as far as it)
    ours = [o[0].tokens for o in translate(model, tokenizer, sources, DecodeConfig())]
    theirs = generated(num_beams=1)
    ended = [n for n, o in enumerate(ours) if len(o) < limits[n]]
    assert [t[: len(o)] for t, o in zip(theirs, ours)] == ours
    assert [theirs[n] for n in ended] == [ours[n] for n in ended]
    # beam 4 (the generation config's default) with the same length penalty, Transformers'
    # power normalisation (length ** alpha), on the sentences our search ended itself
    beam = translate(model, tokenizer, sources, DecodeConfig(4, length_norm="power"))
    found = generated(num_beams=4, length_penalty=0.6, early_stopping=True)
    same = sum(found[n] == beam[n][0].tokens for n in ended)
    assert same >= 0.99 * len(ended), f"beam 4: {same}/{len(ended)} identical"
    assert len(ended) >= 0.9 * len(sources)
    # the text, as a user reads it
    text = hf_tokenizer.batch_decode(
        marian.generate(**batch, num_beams=1, max_new_tokens=max(limits) + 1),
        skip_special_tokens=True,
    )
    assert [text[n] for n in ended] == [tokenizer.decode([ours[n]])[0] for n in ended]
    # the model card names the data, the score and how it was made
    card = (out / "README.md").read_text()
    metrics = json.loads((demo_run / "metrics.json").read_text())
    assert f"Test BLEU **{metrics['test_bleu']}**" in card
    assert metrics["test_bleu_signature"] in card and "python scripts/export_hf.py" in card
    assert "synthetic" in card and "a perfect model scores 100" in card
    # the search is the run's own (its decode config: no final evaluation in the demo)
    saved = OmegaConf.load(demo_run / "config.yaml")
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["num_beams"] == saved.decode.beam_size
    if saved.decode.beam_size > 1:
        assert generation["length_penalty"] == saved.decode.length_penalty
    else:  # greedy: Transformers refuses beam-only settings
        assert "length_penalty" not in generation and "early_stopping" not in generation
    check_card_is_safe_to_publish(card, out, demo_run, metrics)


def check_card_is_safe_to_publish(card: str, out, run, metrics: dict) -> None:
    import re

    from huggingface_hub import ModelCard

    # no path of this machine, no cache or run-directory key
    assert str(run) not in card and str(out) not in card and os.path.expanduser("~") not in card
    assert not re.search(r"(^|[\s'\"=(:])/(tmp|home|root|work|Users)\b", card), card
    for key in ("cache_dir", "output_dir", "hydra"):
        assert key not in card, key
    # the Hub header, read offline as the Hub reads it
    loaded = ModelCard.load(out / "README.md")
    assert loaded.data.language == ["es", "en"] and loaded.data.license == "cc-by-4.0"
    assert loaded.data.pipeline_tag == "translation" and loaded.data.library_name == "transformers"
    (result,) = loaded.data.eval_results
    assert (result.metric_type, result.metric_value) == ("bleu", metrics["test_bleu"])
    assert result.task_type == "translation" and result.dataset_split == "test"
    # the example: the repo id, the sentence as a Python string literal
    assert 'from_pretrained("someone/demo-es-en")' in card
    assert '["el gato negro duerme en casa"]' in card
    assert "generated by transformer-mt's grammar" in card  # the data's terms


@pytest.mark.slow  # the shared demo model
def test_a_long_input_is_cut_by_the_exported_tokenizer_not_failed_in_the_model(
    demo_run, tmp_path
) -> None:
    from transformer_mt.deploy.hf import export_hf

    out = export_hf(demo_run, tmp_path / "hf")
    marian = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    positions = marian.config.max_position_embeddings
    assert hf_tokenizer.model_max_length == positions
    long = " ".join(["el gato negro duerme en casa"] * 100)  # far past the model's positions
    batch = hf_tokenizer([long], return_tensors="pt", truncation=True)
    assert batch["input_ids"].shape[1] == positions and batch["input_ids"][0, -1] == EOS_ID
    with torch.no_grad():
        found = marian.generate(**batch, num_beams=1, max_new_tokens=5)
    assert found.shape[0] == 1


@pytest.mark.slow  # the shared demo model
def test_a_run_without_tokenizer_or_checkpoint_is_one_error_line(demo_run, tmp_path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(demo_run, run, ignore=shutil.ignore_patterns("checkpoints", "ct2", "hf"))
    done = run_script("export_hf.py", run, "--out", tmp_path / "out")
    assert done.returncode == 2 and done.stderr.startswith("error: no checkpoint at"), done.stderr
    (run / "tokenizer.model").unlink()
    done = run_script("export_hf.py", run, "--out", tmp_path / "out")
    assert done.returncode == 2 and "has no tokenizer.model" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
