"""CTranslate2 (issue #14): the export reproduces our model exactly, and the engine plugs into
translate.py and evaluate.py with the same search options."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from transformer_mt import Transformer
from transformer_mt.decoding import DecodeConfig, translate
from transformer_mt.errors import UserError

from .scripts import run_script

ctranslate2 = pytest.importorskip("ctranslate2", reason='pip install -e ".[ct2]"')


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformer_mt.data.tokenizer import Tokenizer

    sentences = ["el gato negro duerme en casa", "the black cat sleeps at home"] * 20
    sentences += ["la casa blanca", "the white house", "los perros comen", "the dogs eat"] * 10
    return Tokenizer.train(sentences, 60, tmp_path_factory.mktemp("spm"))


def _export(model, tokenizer, out):
    """Our export path for an in-memory model (export_ct2 reads a run directory)."""
    from transformer_mt.deploy.ct2 import INFO_FILE, TOKENIZER_FILE, ct2_spec, vocabulary

    spec = ct2_spec(model, vocabulary(tokenizer))
    spec.validate()
    spec.optimize(quantization=None)
    out.mkdir()
    spec.save(str(out))
    (out / TOKENIZER_FILE).write_bytes(tokenizer.path.read_bytes())
    info = {"checkpoints": [], "model": {"max_positions": model.cfg.max_positions}}
    (out / INFO_FILE).write_text(json.dumps(info))
    return out


@pytest.mark.parametrize(
    "change",
    [
        {},  # post-LN, tied embeddings, sinusoids: the paper's
        {"norm_first": True},  # pre-LN with its final LayerNorms
        {"tie_embeddings": False, "positional": "learned"},
    ],
    ids=["post-ln", "pre-ln", "untied-learned"],
)
def test_export_reproduces_the_log_probabilities_and_greedy_output_of_a_random_model(
    tiny_cfg, tokenizer, tmp_path, change
) -> None:
    from transformer_mt.deploy.ct2 import CT2Translator
    from transformer_mt.model.vocab import BOS_ID, EOS_ID

    torch.manual_seed(1)
    cfg = replace(tiny_cfg, vocab_size=tokenizer.vocab_size, d_model=32, n_heads=4, **change)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # random LayerNorm affines, so that a wrong norm placement shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    engine = CT2Translator(_export(model, tokenizer, tmp_path / "ct2"), threads=1)
    pairs = [
        ("el gato negro duerme en casa", "the black cat sleeps at home"),
        ("la casa", "the house"),
    ]
    # teacher-forced: every target token's log-probability, as CTranslate2 scores it
    pieces = [[tokenizer.sp.id_to_piece(i) for i in tokenizer.encode([s])[0]] for s, _ in pairs]
    targets = [[tokenizer.sp.id_to_piece(i) for i in tokenizer.encode([t])[0]] for _, t in pairs]
    scored = engine.translator.score_batch(pieces, targets)
    for (src, tgt), result in zip(pairs, scored):
        src_ids = torch.tensor([tokenizer.encode([src])[0] + [EOS_ID]])
        tgt_ids = tokenizer.encode([tgt])[0] + [EOS_ID]
        with torch.no_grad():
            logits = model(src_ids, torch.tensor([[BOS_ID, *tgt_ids[:-1]]]))[0]
        ours = logits.log_softmax(-1).gather(-1, torch.tensor(tgt_ids)[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(result.log_probs), ours, atol=1e-4, rtol=1e-4)
    sentences = [s for s, _ in pairs] + ["los perros comen en casa"]
    ours = translate(model, tokenizer, sentences, DecodeConfig(max_len_b=8))
    theirs = engine.translate(sentences, DecodeConfig(max_len_b=8))
    assert [o[0].tokens for o in ours] == [t[0].tokens for t in theirs]


def test_a_model_ctranslate2_cannot_represent_is_refused(tiny_cfg, tokenizer) -> None:
    from transformer_mt.deploy.ct2 import ct2_spec, vocabulary

    model = Transformer(replace(tiny_cfg, vocab_size=tokenizer.vocab_size, d_k=4))
    with pytest.raises(UserError, match=r"model.d_k=4 differs from d_model/h=8"):
        ct2_spec(model, vocabulary(tokenizer))


@pytest.mark.slow  # trains the shared demo model and runs the command lines
def test_exported_demo_model_translates_and_scores_as_ours(demo_run, tmp_path) -> None:
    from transformer_mt.checkpoint import load_model, run_data_config
    from transformer_mt.data.sources import demo_files
    from transformer_mt.deploy.ct2 import CT2Translator
    from transformer_mt.metrics import corpus_bleu

    model, tokenizer, _ = load_model(demo_run)
    with open(demo_files(run_data_config(demo_run))["test"], encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    sources, refs = [r["src"] for r in rows], [r["tgt"] for r in rows]

    def script(*args) -> str:
        result = run_script(*args, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        return result.stdout

    script("export_ct2.py", demo_run, "--out", "fp32")
    script(
        "export_ct2.py",
        demo_run,
        "--out",
        "int8",
        "--quantization",
        "int8",
    )
    fp32 = CT2Translator(tmp_path / "fp32", threads=1)
    int8 = CT2Translator(tmp_path / "int8", compute_type="int8", threads=1)
    greedy, beam = DecodeConfig(), DecodeConfig(4, length_norm="power")
    ours = {d.beam_size: translate(model, tokenizer, sources, d) for d in (greedy, beam)}
    theirs = {d.beam_size: fp32.translate(sources, d) for d in (greedy, beam)}
    bleu = {k: corpus_bleu([t[0].text for t in v], refs).score for k, v in ours.items()}
    # a model that translates (52 BLEU when written), so agreeing with it means something
    assert min(bleu.values()) >= 40, bleu
    # greedy: identical on every sentence; beam 4: on at least 99%
    assert [o[0].tokens for o in ours[1]] == [t[0].tokens for t in theirs[1]]
    same = sum(o[0].tokens == t[0].tokens for o, t in zip(ours[4], theirs[4]))
    assert same >= 0.99 * len(sources), f"beam 4: {same}/{len(sources)} identical"
    for k in (1, 4):
        exported = corpus_bleu([t[0].text for t in theirs[k]], refs).score
        assert abs(exported - bleu[k]) <= 0.1
        quantized = corpus_bleu(
            [t[0].text for t in int8.translate(sources, greedy if k == 1 else beam)], refs
        )
        # int8 weights on a 64-wide model: 0.0 to 1.4 BLEU away in the runs seen
        assert abs(quantized.score - bleu[k]) <= 2.5, (
            f"int8, beam {k}: {quantized.score} vs {bleu[k]}"
        )

    # translate.py --engine ct2: the same lines, and the same alignments, as ours
    text = "\n".join(sources[:20]) + "\n"
    common = ["translate.py", demo_run, "--beam", "1", "--alignments"]
    torch_out = run_script(*common, input=text)
    ct2_out = run_script(*common, "--engine", "ct2", "--ct2-dir", tmp_path / "fp32", input=text)
    assert ct2_out.returncode == 0, ct2_out.stderr
    assert ct2_out.stdout == torch_out.stdout and " ||| " in ct2_out.stdout
    for flag in (["--mode", "full"], ["--diagonal", "4"]):  # a reading ct2 cannot give
        ct2 = ["--engine", "ct2", "--ct2-dir", tmp_path / "fp32", *flag]
        refused = run_script(*common, *ct2, input=text)
        assert refused.returncode != 0, flag
        assert "no --head, --mode, --method, --tau or --diagonal" in refused.stderr, flag

    # evaluate.py decode.engine=ct2: the export's BLEU on the test split
    out = script(
        "evaluate.py",
        f"run_dir={demo_run}",
        "decode.engine=ct2",
        f"decode.ct2_dir={tmp_path / 'fp32'}",
        "decode.length_norm=power",
        f"output_dir={tmp_path / 'eval'}",
    )
    scores = json.loads((tmp_path / "eval" / "scores.json").read_text())
    assert "engine ct2" in out and scores["decode"]["engine"] == "ct2"
    assert scores["bleu"] == pytest.approx(round(bleu[4], 2), abs=0.1)
