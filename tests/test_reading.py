"""``HeadReading`` and ``parse_head``: the one way every command line names a head."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from transformer_mt.align.extract import Extraction, record_folder, save_tuned
from transformer_mt.align.reading import BestHead, HeadReading, default_reading, parse_head
from transformer_mt.config import AlignConfig
from transformer_mt.errors import UserError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:2", HeadReading(1, 2)),
        ("-1", HeadReading(6, None)),  # the last layer, heads averaged
        ("2", HeadReading(2, None)),
        ("-2:1", HeadReading(5, 1)),  # the penultimate layer's first head
        ("3:-1", HeadReading(3, 8)),  # the last head
    ],
)
def test_layer_and_head_numbers_are_resolved_once(text, expected) -> None:
    assert parse_head(text, 6, 8) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("7:1", r"--head '7:1': layer 7: the model has layers 1..6 \(or -1..-6\)"),
        ("0", r"--head '0': layer 0: the model has layers 1..6"),
        ("-7", r"--head '-7': layer -7"),
        ("2:9", r"--head '2:9': head 9: the model has heads 1..8"),
        ("a:b", r"--head 'a:b': expected LAYER:HEAD, LAYER, best or guided"),
        ("", r"expected LAYER:HEAD"),
        ("1:2:3", r"expected LAYER:HEAD"),
    ],
)
def test_bad_heads_are_refused_with_what_the_model_has(text, message) -> None:
    with pytest.raises(UserError, match=message):
        parse_head(text, 6, 8)


def test_the_mode_is_one_of_three_and_carried() -> None:
    reading = parse_head("2:3", 6, 8, mode="shift")
    assert reading == HeadReading(2, 3, "shift") and reading.shift and not reading.full_context
    assert parse_head("2", 6, 8, mode="full").full_context
    assert reading.name == "2:3 (shift)" and HeadReading(4, None).name == "4"
    with pytest.raises(UserError, match="reading mode 'both': choose one of causal, shift, full"):
        parse_head("2", 6, 8, mode="both")
    with pytest.raises(ValueError, match="resolved and 1-based"):
        HeadReading(-1, None)  # only parse_head / HeadReading.of take user numbers


def test_guided_reads_the_runs_config_and_best_its_record(tmp_path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(UserError, match="--head guided: .* was not trained with align.guided"):
        parse_head("guided", 6, 8, run_dir=run)
    align = {"guided": True, "layer": -2, "head": 3, "mode": "full", "extract": "argmax"}
    OmegaConf.save(OmegaConf.create({"align": align}), run / "config.yaml")
    assert parse_head("guided", 6, 8, run_dir=run) == HeadReading(5, 3, "full")
    # a checkpoint file finds its run
    ckpt = run / "checkpoints" / "last.ckpt"
    ckpt.touch()
    assert parse_head("guided", 6, 8, run_dir=ckpt) == HeadReading(5, 3, "full")

    with pytest.raises(UserError, match=r"--head best: .*best_head.json does not exist"):
        parse_head("best", 6, 8, run_dir=run)
    (run / "align").mkdir()
    best = HeadReading(4, 2, "shift", Extraction("grow-diag", 0.1))
    BestHead(best, 0.25).save(run / "align" / "best_head.json", {}, "a test")
    # the recorded reading comes back whole: head, mode and how its links were read
    assert parse_head("best", 6, 8, run_dir=run) == best
    assert parse_head("best", 6, 8, run_dir=ckpt) == best
    assert parse_head("best", 6, 8, run_dir=run, method="argmax") == HeadReading(4, 2, "shift")
    assert json.loads((run / "align" / "best_head.json").read_text())["scored_on"] == "a test"
    with pytest.raises(UserError, match="--head best needs a run directory"):
        parse_head("best", 6, 8)
    with pytest.raises(UserError, match="--mode causal goes with --head L:H or L; --head best"):
        parse_head("best", 6, 8, run_dir=run, mode="causal")
    # a record of an older align.py (method and mode fused) is named, not misread
    (run / "align" / "best_head.json").write_text(json.dumps({"layer": 1, "reading": "shift"}))
    with pytest.raises(UserError, match="written by an older scripts/align.py"):
        parse_head("best", 6, 8, run_dir=run)


def test_one_default_head_everywhere_guided_then_best_then_the_last_layer(tmp_path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    plain = {"guided": False, "layer": -2, "head": 1, "mode": "causal"}
    OmegaConf.save(OmegaConf.create({"align": plain}), run / "config.yaml")
    assert parse_head(None, 6, 8, run_dir=run) == HeadReading(6, None)  # nothing recorded
    assert default_reading(None, 6, 8) == HeadReading(6, None)
    # a tuned tau and prior: read by grow-diag with the prior
    save_tuned(record_folder(run), Extraction("grow-diag", 0.15, 8), "dev.tsv", [])
    tuned = Extraction("grow-diag", 0.15, 8)
    assert parse_head(None, 6, 8, run_dir=run) == HeadReading(6, None, extraction=tuned)
    assert parse_head("2:1", 6, 8, run_dir=run) == HeadReading(2, 1, extraction=tuned)
    best = HeadReading(4, 2, "shift")
    BestHead(best, 0.25).save(record_folder(run) / "best_head.json", {}, "a test")
    assert parse_head(None, 6, 8, run_dir=run) == best
    guided = {"guided": True, "layer": 1, "head": 3, "mode": "full", "extract": "argmax"}
    OmegaConf.save(OmegaConf.create({"align": guided}), run / "config.yaml")
    # the guided head wins, read by the run's tuned tau
    assert parse_head(None, 6, 8, run_dir=run) == HeadReading(1, 3, "full", tuned)
    given = parse_head(None, 6, 8, run_dir=run, tau=0.3).extraction  # the recorded prior kept
    assert given == Extraction("grow-diag", 0.3, 8)
    plain = parse_head("2:1", 6, 8, run_dir=run, diagonal=0).extraction  # the prior turned off
    assert plain == Extraction("grow-diag", 0.15) and plain.name == "grow-diag 0.15"
    with pytest.raises(UserError, match="--mode shift goes with --head L:H or L; the default"):
        parse_head(None, 6, 8, run_dir=run, mode="shift")


def test_a_guided_head_is_built_once_from_align_config() -> None:
    align = AlignConfig(guided=True, layer=-1, head=2, mode="shift")
    assert HeadReading.from_config(align, 3, 4) == HeadReading(3, 2, "shift")
    with pytest.raises(UserError, match=r"align.layer=5 / align.head=1: layer 5: the model has"):
        HeadReading.from_config(AlignConfig(layer=5), 3, 4)
    with pytest.raises(UserError, match="align.mode must be one of causal, shift, full"):
        AlignConfig(mode="sideways")
