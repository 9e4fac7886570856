"""On a CUDA device: the fused attention against the reference, cached decoding, a few training steps.

These run only with ``-m gpu`` (``benchmarks/gpu_check.sh`` runs them) and skip where no CUDA
device is present. The CPU suite pins the same properties; these check that the CUDA kernels
PyTorch picks (flash / memory-efficient SDPA, bf16 autocast, fused Adam) keep them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.decoding import beam_search, greedy_decode
from transformer_mt.model.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.vocab import BOS_ID, EOS_ID, PAD_ID

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

# bf16 keeps 8 bits of mantissa: the fused and reference paths round differently.
TOLERANCE = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("masked", [False, True], ids=["full", "padded"])
def test_cuda_sdpa_matches_the_reference(dtype: torch.dtype, masked: bool) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 8, n, 64, device="cuda", dtype=dtype) for n in (33, 47, 47))
    mask = None
    if masked:
        lengths = torch.tensor([47, 30, 12, 1])
        ids = (torch.arange(47)[None] < lengths[:, None]).long()  # 1 = token, 0 = pad
        mask = padding_mask(ids, 0).cuda()  # (4, 1, 1, 47)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    reference, weights = scaled_dot_product_attention(q.float(), k.float(), v.float(), mask)
    torch.testing.assert_close(fused.float(), reference, **TOLERANCE[dtype])
    if masked:
        assert weights[3, :, :, 1:].abs().max() == 0.0  # one real key: all weight on it


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_cuda_multi_head_fast_path_matches_need_weights_path(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(512, 8).cuda().eval()
    x = torch.randn(3, 40, 512, device="cuda")
    with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
        fast, _, none = mha(x, causal=True)
        slow, _, weights = mha(x, causal=True, need_weights=True)
    assert none is None and weights.shape == (3, 8, 40, 40)
    assert weights.triu(1).abs().max() == 0.0  # no weight on the future
    torch.testing.assert_close(fast.float(), slow.float(), **TOLERANCE[dtype])


def _model(norm_first: bool = False) -> Transformer:
    cfg = TransformerConfig(
        name="gpu-test",
        n_layers=2,
        d_model=64,
        d_ff=128,
        n_heads=4,
        dropout=0.0,
        vocab_size=40,
        max_positions=128,
    )
    return Transformer(replace(cfg, norm_first=norm_first)).cuda().eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_cuda_cached_steps_equal_full_recomputation(norm_first: bool) -> None:
    torch.manual_seed(0)
    model = _model(norm_first)
    src = torch.tensor([[5, 6, 7, 8, EOS_ID], [9, 10, EOS_ID, PAD_ID, PAD_ID]], device="cuda")
    tgt_in = torch.cat(
        [torch.full((2, 1), BOS_ID), torch.randint(4, 40, (2, 9))], dim=1
    ).cuda()  # (2, 10)
    with torch.no_grad():
        memory, mask = model.encode(src)
        full = model.decode(tgt_in, memory, mask).log_softmax(-1)  # (2, 10, V)
        cache = model.start_decoding(memory, mask)
        for t in range(tgt_in.size(1)):
            step = model.decode_step(tgt_in[:, t : t + 1], cache)
            # Different kernels for one query row vs many: fp32 rounding, not exact.
            torch.testing.assert_close(step, full[:, t], atol=1e-4, rtol=1e-4)


def test_cuda_decoding_agrees_with_cpu() -> None:
    torch.manual_seed(0)
    model = _model()
    src = torch.randint(4, 40, (6, 9), device="cuda")
    src[:, -1] = EOS_ID
    with torch.no_grad():
        on_gpu = greedy_decode(model, src, max_len_a=1.0, max_len_b=5)
        beams_gpu = beam_search(model, src, beam_size=4, alpha=0.6, max_len_b=5)
        model, src = model.cpu(), src.cpu()
        on_cpu = greedy_decode(model, src, max_len_a=1.0, max_len_b=5)
        beams_cpu = beam_search(model, src, beam_size=4, alpha=0.6, max_len_b=5)
    assert on_gpu == on_cpu
    assert [b[0].tokens for b in beams_gpu] == [b[0].tokens for b in beams_cpu]


def test_training_steps_with_trainer_gpu(compose_cfg, tmp_path, caplog) -> None:
    from transformer_mt.train import run

    caplog.set_level(logging.INFO, logger="transformer_mt.train")
    cfg = compose_cfg(
        "trainer=gpu",
        "trainer.max_steps=60",
        "trainer.log_every_n_steps=10",
        "trainer.enable_progress_bar=false",
        "data.train_size=2000",
        "data.valid_size=50",
        "data.test_size=50",
        "data.vocab_size=300",
    )
    metrics = run(cfg)
    config = (tmp_path / "run" / "config.yaml").read_text()
    assert "precision: auto-mixed" in config  # resolved at run time, to bf16 on a bf16 GPU
    assert "precision: bf16-mixed" in caplog.text
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["test_bleu"] == metrics["test_bleu"]
    assert metrics["test_sentences"] == 50  # the whole test split was decoded on the GPU
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu")
    assert ckpt["global_step"] == 60


def test_training_steps_make_no_implicit_synchronisation(compose_cfg, monkeypatch) -> None:
    """Steps 3..N run under ``torch.cuda.set_sync_debug_mode("error")``: a host read hidden in
    a library call (``nonzero``, boolean-mask indexing, ``.cpu()``, ``.item()``) inside the
    forward, loss, backward, guard or optimizer step raises. The mode is lifted around the
    reports, which read the device once on purpose (``trainer.log_every_n_steps``)."""
    import lightning as L

    import transformer_mt.train as train

    class SyncDebug(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if trainer.global_step >= 2:  # after the first steps' allocations and autotuning
                torch.cuda.set_sync_debug_mode("error")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            torch.cuda.set_sync_debug_mode("default")  # before the StepReporter's report

    build = train.build_trainer

    def with_sync_debug(cfg, out):
        trainer = build(cfg, out)
        trainer.callbacks.insert(0, SyncDebug())
        return trainer

    monkeypatch.setattr(train, "build_trainer", with_sync_debug)
    try:
        metrics = train.run(
            compose_cfg(
                "trainer=gpu",
                "trainer.max_steps=20",
                "trainer.log_every_n_steps=1000",
                "trainer.enable_progress_bar=false",
                "data.train_size=1000",
                "data.valid_size=20",
                "data.test_size=20",
                "data.vocab_size=300",
                "data.alignments=builtin",
                "align.guided=true",  # the guided loss's gather is in the step too
            )
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert metrics["steps"] == 20
