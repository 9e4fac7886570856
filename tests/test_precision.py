"""bf16 mixed precision on the CPU: the autocast paths a GPU run takes, without a GPU."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.decoding import beam_search, greedy_decode

from .test_resume import _compose, _series


@pytest.mark.slow  # trains
def test_training_validation_and_decoding_under_bf16_mixed(tmp_path, monkeypatch) -> None:
    """trainer.precision=bf16-mixed reaches the step: the logits the loss sees are bf16 (a
    precision silently ignored would leave them fp32), the loss is fp32, the weights stay fp32."""
    from transformer_mt import loss as losses  # translation_loss looks it up there
    from transformer_mt.train import run

    real, seen = losses.label_smoothed_nll, set()

    def recording(logits, target, epsilon, *rest):
        loss, nll = real(logits, target, epsilon, *rest)
        if logits.requires_grad:  # a training step
            seen.add((logits.dtype, loss.dtype))
        return loss, nll

    monkeypatch.setattr(losses, "label_smoothed_nll", recording)
    out = tmp_path / "run"
    metrics = run(
        _compose(
            tmp_path,
            f"output_dir={out}",
            "trainer.precision=bf16-mixed",
            "trainer.max_steps=30",
            "trainer.log_every_n_steps=10",
        )
    )
    series = _series(out, "train/loss")
    assert [step for step, _ in series] == [9, 19, 22, 29]  # every 10 steps, and the epoch's end
    losses = [loss for _, loss in series]
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]  # it learns
    assert math.isfinite(metrics["val_ppl"]) and metrics["test_sentences"] == 10
    ckpt = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    weights = [t for t in ckpt["state_dict"].values() if t.is_floating_point()]
    assert all(t.dtype == torch.float32 for t in weights)  # mixed: the weights stay fp32
    assert seen == {(torch.bfloat16, torch.float32)}  # every training step under autocast


def test_decoding_under_cpu_autocast_stays_finite(tiny_cfg: TransformerConfig) -> None:
    """Masks use finfo(dtype).min, the cache follows the autocast dtype, scores stay finite."""
    model = Transformer(tiny_cfg).eval()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])  # the second sentence is padded
    with torch.autocast("cpu", dtype=torch.bfloat16):
        greedy = greedy_decode(model, src, max_len_b=6)
        beams = beam_search(model, src, beam_size=3, max_len_b=6)
    # a region of its own: on torch 2.6 to 2.10 (not 2.13) autocast's weight cache keeps the
    # casts made under decoding's inference mode, which a forward with autograd cannot use
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, torch.tensor([[2, 5, 6], [2, 8, 0]]))
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    assert len(greedy) == 2 and all(len(h) <= 4 + 6 for h in greedy)  # |x| + 6 at most
    assert all(math.isfinite(b[0].score) for b in beams)


@pytest.mark.slow  # the shared demo run
def test_bf16_greedy_tokens_agree_with_fp32_on_a_trained_model(demo_run) -> None:
    """bf16 rounds logits: a near tie may flip a token, but nearly every sentence must decode
    to fp32's tokens exactly: 94% and 98% in two trainings of the shared demo model (87% on a
    weaker one of test BLEU 6); a broken cast or mask would drop it towards 0. It is printed."""
    import json

    from transformer_mt.checkpoint import load_model, run_data_config
    from transformer_mt.data.sources import demo_files
    from transformer_mt.model.vocab import EOS_ID, PAD_ID

    model, tokenizer, _ = load_model(demo_run)
    with open(demo_files(run_data_config(demo_run))["valid"], encoding="utf-8") as f:
        sources = [json.loads(line)["src"] for line in f][:100]
    ids = [s + [EOS_ID] for s in tokenizer.encode(sources)]
    src = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(s) for s in ids], batch_first=True, padding_value=PAD_ID
    )
    with torch.no_grad():
        fp32 = greedy_decode(model, src, max_len_b=20)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = greedy_decode(model, src, max_len_b=20)
    same = sum(a == b for a, b in zip(fp32, bf16)) / len(fp32)
    print(f"bf16 greedy equal to fp32 on {same:.0%} of {len(fp32)} sentences")
    assert len(fp32) == len(bf16) == 100 and same >= 0.9
