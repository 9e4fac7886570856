"""Compile-ready training (issue #28, ``trainer.compile=true``): forward and loss in one graph,
eager's losses, and padded widths that bound the recompiles of an epoch."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch

from transformer_mt.config import DataConfig, DecodeConfig, OptimConfig, TransformerConfig
from transformer_mt.data.batching import Batch, TokenBatchSampler, collate_columns, round_up
from transformer_mt.lit_module import TranslationModule
from transformer_mt.loss import label_smoothed_nll, translation_loss
from transformer_mt.model import Transformer
from transformer_mt.model.vocab import BOS_ID, EOS_ID, PAD_ID


def _batch(lengths: list[int], vocab: int, width: int, seed: int) -> Batch:
    """Pairs of equal source/target ``lengths`` (EOS included), padded to ``width``."""
    g = torch.Generator().manual_seed(seed)
    B = len(lengths)
    src = torch.full((B, width), PAD_ID)
    tgt_out = torch.full((B, width), PAD_ID)
    for row, n in enumerate(lengths):
        src[row, : n - 1] = torch.randint(4, vocab, (n - 1,), generator=g)
        tgt_out[row, : n - 1] = torch.randint(4, vocab, (n - 1,), generator=g)
        src[row, n - 1] = tgt_out[row, n - 1] = EOS_ID
    tgt_in = torch.full_like(tgt_out, PAD_ID)
    tgt_in[:, 0] = BOS_ID
    tgt_in[:, 1:] = torch.where(tgt_out[:, :-1] == EOS_ID, PAD_ID, tgt_out[:, :-1])
    return Batch(src, tgt_in, tgt_out, torch.arange(B), n_tgt_tokens=sum(lengths))


def _module(compile: bool | str, vocab_size: int = 30) -> TranslationModule:
    torch.manual_seed(0)
    # one layer: compiling costs by the operation, and a cold Inductor cache (CI) pays it all
    model = TransformerConfig(
        name="test", n_layers=1, d_model=16, d_ff=32, n_heads=2, dropout=0.1, vocab_size=vocab_size
    )
    module = TranslationModule(
        asdict(model), asdict(OptimConfig()), asdict(DecodeConfig()), compile=compile
    )
    module.configure_model()
    return module


@pytest.fixture
def traced_only(monkeypatch) -> None:
    """Dynamo traces and counts graphs without Inductor's code generation (seconds a graph when
    cold): for the graph-count tests. The equality tests compile for real."""
    monkeypatch.setenv("TRANSFORMER_MT_COMPILE_BACKEND", "eager")


def test_the_masked_sum_loss_is_the_boolean_indexed_one() -> None:
    logits, target = torch.randn(3, 5, 11), torch.randint(4, 11, (3, 5))
    target[0, 3:] = PAD_ID
    lprobs = logits.log_softmax(-1)
    real = target != PAD_ID
    nll = -lprobs.gather(-1, target[..., None]).squeeze(-1)[real]
    smooth = -lprobs.mean(-1)[real]
    loss, total = label_smoothed_nll(logits, target, 0.1)
    torch.testing.assert_close(loss, (0.9 * nll + 0.1 * smooth).sum())
    torch.testing.assert_close(total, nll.sum())


def test_forward_and_loss_trace_as_one_graph_without_breaks() -> None:
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(name="test", n_layers=2, d_model=16, d_ff=32, n_heads=2, vocab_size=30)
    ).train()
    batch = _batch([5, 9, 3], 30, 16, seed=0)
    explanation = torch._dynamo.explain(translation_loss)(
        model, batch.src, batch.tgt_in, batch.tgt_out, 0.1
    )
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.slow  # inductor compiles (tens of seconds with a cold cache)
def test_compiled_training_matches_eager_over_50_steps() -> None:
    """Same initial weights, batches and dropout masks (Inductor's fallback_random draws them as
    eager does): the losses of 50 Adam steps agree within fp32 tolerance."""
    sizes = [[5, 9, 3, 16], [12, 2], [7, 15, 4]]  # one padded width, the batch size varies
    batches = [_batch(sizes[i % 3], 30, 16, seed=i) for i in range(50)]
    losses = {}
    for compile in (False, True):
        module = _module(compile)
        optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
        losses[compile] = []
        torch.manual_seed(1)
        with torch._inductor.config.patch(fallback_random=True):
            for batch in batches:
                loss, _, n_tokens = module._step(batch)
                optimizer.zero_grad()
                (loss / n_tokens).backward()
                optimizer.step()
                losses[compile].append(loss.item() / n_tokens)
        if compile:
            assert module.compile_counter.graphs == 1  # batch sizes 4, 2, 3: B left symbolic
    torch.testing.assert_close(losses[True], losses[False], rtol=1e-4, atol=1e-5)
    assert losses[False][-1] < losses[False][0]  # it trained


@pytest.mark.slow  # inductor compiles (tens of seconds with a cold cache)
def test_an_epoch_of_padded_demo_batches_compiles_a_bounded_number_of_graphs(
    tmp_path, traced_only
) -> None:
    from transformer_mt.datamodule import TranslationDataModule

    cfg = DataConfig(
        name="demo_es_en",
        train_size=600,
        valid_size=20,
        test_size=20,
        vocab_size=300,
        max_len=64,
        max_tokens=2048,
        cache_dir=str(tmp_path),
        pad_multiple=16,
    )
    data = TranslationDataModule(cfg, seed=0)
    data.setup("fit")
    loader = data.train_dataloader()
    batches = list(loader)
    widths = {(b.src.size(1), b.tgt_in.size(1)) for b in batches}
    assert all(s % 16 == 0 and t % 16 == 0 for s, t in widths)
    assert all(b.src.numel() <= 2048 and b.tgt_in.numel() <= 2048 for b in batches)
    # without the rounding, the same epoch has a shape per length
    src_lens, tgt_lens = loader.dataset.lengths()
    plain = TokenBatchSampler(src_lens, tgt_lens, 2048, seed=0)
    rounded = {
        (int(round_up(src_lens[b].max(), 16)), int(round_up(tgt_lens[b].max(), 16))) for b in plain
    }
    unpadded = {(int(src_lens[b].max()), int(tgt_lens[b].max())) for b in plain}
    assert len(unpadded) >= 2 * len(rounded)

    module = _module(compile=True, vocab_size=300)
    with torch.no_grad():  # the forward graphs are what recompiles; each has one backward
        for batch in batches:
            module._step(batch)
    # one graph per (source, target) width seen, the batch size symbolic: at most 10 an epoch
    assert module.compile_counter.graphs == len(widths) <= 10, widths


@pytest.mark.parametrize("multiple", [0, -16])
def test_pad_multiple_below_one_is_refused(tmp_path, multiple: int) -> None:
    from transformer_mt.errors import UserError

    with pytest.raises(UserError, match="data.pad_multiple"):
        DataConfig(name="demo_es_en", cache_dir=str(tmp_path), pad_multiple=multiple)


def test_collate_rounds_widths_up_and_keeps_every_token() -> None:
    import numpy as np

    from transformer_mt.data.batching import Columns

    cols = Columns(
        src=np.array([5, 6, EOS_ID, 7, EOS_ID]),
        src_lens=np.array([3, 2]),
        tgt=np.array([8, EOS_ID, 9, 10, 11, EOS_ID]),
        tgt_lens=np.array([2, 4]),
        index=np.array([0, 1]),
    )
    plain, padded = collate_columns(cols), collate_columns(cols, pad_multiple=8)
    assert padded.src.shape == padded.tgt_out.shape == padded.tgt_in.shape == (2, 8)
    assert torch.equal(padded.src[:, :3], plain.src) and (padded.src[:, 3:] == PAD_ID).all()
    assert torch.equal(padded.tgt_out[:, :4], plain.tgt_out)
    assert (
        torch.equal(padded.tgt_in[:, :4], plain.tgt_in) and (padded.tgt_in[:, 4:] == PAD_ID).all()
    )
    assert padded.n_tgt_tokens == plain.n_tgt_tokens == 6


@pytest.mark.slow  # inductor compiles (tens of seconds with a cold cache)
def test_guided_step_compiles_to_eager_losses_and_head_weights() -> None:
    import functools

    from transformer_mt.loss import guided_translation_loss

    module = _module(compile=True)
    module.model.eval()  # no dropout: the two paths see the same function
    batch = _batch([5, 9, 3], 30, 16, seed=3)
    args = (0.1, 0, 1, True)  # layer 1, head 2 (0-based), full context: the second pass
    with torch.no_grad():
        compiled = module._run_compiled(
            functools.partial(module.compiled_guided_loss, module.model), batch, *args
        )
        eager = guided_translation_loss(module.model, batch.src, batch.tgt_in, batch.tgt_out, *args)
    for c, e in zip(compiled, eager):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-5)
    assert compiled[2].shape == (3, 16, 16)  # (B, T, S)
