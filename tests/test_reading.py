"""``HeadReading`` and ``parse_head``: the one way every command line names a head."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from transformer_mt.align.extract import Extraction, Trial
from transformer_mt.align.reading import (
    MODES,
    HeadReading,
    ReadingRecord,
    default_reading,
    parse_head,
    record_folder,
)
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

    with pytest.raises(UserError, match=r"--head best: .*reading.json does not exist"):
        parse_head("best", 6, 8, run_dir=run)
    best = HeadReading(4, 2, "shift", Extraction("grow-diag", 0.1, 8.0, 30, 30, 0.5))
    ReadingRecord(best, "xlwa_dev").save(record_folder(run))
    # the recorded reading comes back whole: head, mode and every parameter of its reading
    assert parse_head("best", 6, 8, run_dir=run) == best
    assert parse_head("best", 6, 8, run_dir=ckpt) == best
    argmax = parse_head("best", 6, 8, run_dir=run, method="argmax")
    assert argmax == HeadReading(4, 2, "shift", Extraction("argmax", None, 8.0, 30, 30, 0.5))
    with pytest.raises(UserError, match="--head best needs a run directory"):
        parse_head("best", 6, 8)
    with pytest.raises(UserError, match="--mode causal goes with --head L:H or L; --head best"):
        parse_head("best", 6, 8, run_dir=run, mode="causal")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "extraction",
    [Extraction(), Extraction("grow-diag", 0.2), Extraction("grow-diag", 0.05, 4.0, 20, 30, 0.7)],
)
@pytest.mark.parametrize("head", [3, None])
def test_a_stored_reading_round_trips_through_its_one_form(tmp_path, mode, extraction, head):
    reading = HeadReading(2, head, mode, extraction)
    assert HeadReading.from_dict(json.loads(json.dumps(reading.to_dict())), "x") == reading
    reverse = HeadReading(1, 1, "causal", extraction)
    trials = [Trial("tau", 0.1, 1, 0.3, 0.7, 0.6)]
    ReadingRecord(reading, "xlwa_dev+epps_dev", trials, reverse).save(tmp_path / "align")
    loaded = ReadingRecord.load(tmp_path)
    assert (loaded.reading, loaded.reverse, loaded.trials) == (reading, reverse, trials)
    assert loaded.reading.extraction.source == "tuned on xlwa_dev+epps_dev"


def test_records_of_an_older_align_py_say_how_to_tune_again(tmp_path) -> None:
    run = tmp_path / "run"
    (run / "align").mkdir(parents=True)
    (run / "align" / "extraction.json").write_text(json.dumps({"tau": 0.1, "diagonal": 8}))
    with pytest.raises(UserError, match=r"extraction.json was written by an older .*--tune-on"):
        parse_head(None, 6, 8, run_dir=run)
    (run / "align" / "reading.json").write_text(json.dumps({"reading": {"layer": 1}}))
    with pytest.raises(UserError, match=r"reading.json: not a stored reading"):
        parse_head(None, 6, 8, run_dir=run)


def test_one_policy_the_tuned_reading_then_the_guided_head_then_the_last_layer(tmp_path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    plain = {"guided": False, "layer": -2, "head": 1, "mode": "causal"}
    OmegaConf.save(OmegaConf.create({"align": plain}), run / "config.yaml")
    assert parse_head(None, 6, 8, run_dir=run) == HeadReading(6, None)  # nothing recorded
    assert default_reading(None, 6, 8) == HeadReading(6, None)
    guided = {"guided": True, "layer": 1, "head": 3, "mode": "full", "extract": "argmax"}
    OmegaConf.save(OmegaConf.create({"align": guided}), run / "config.yaml")
    assert parse_head(None, 6, 8, run_dir=run) == HeadReading(1, 3, "full")  # as configured
    # a reading tuned on dev: every command reads it, whole
    tuned = Extraction("grow-diag", 0.15, 8.0, 30, 30, 0.9)
    ReadingRecord(HeadReading(4, 2, "shift", tuned), "dev").save(record_folder(run))
    assert parse_head(None, 6, 8, run_dir=run) == HeadReading(4, 2, "shift", tuned)
    assert parse_head("4:2", 6, 8, run_dir=run, mode="shift") == HeadReading(4, 2, "shift", tuned)
    # a tau tuned for one head is not applied to another, nor to the same head's other rows
    assert parse_head("2:1", 6, 8, run_dir=run) == HeadReading(2, 1)
    assert parse_head("4:2", 6, 8, run_dir=run) == HeadReading(4, 2)
    assert parse_head("guided", 6, 8, run_dir=run) == HeadReading(1, 3, "full")
    # a command line changes what it names and keeps the rest of the tuned reading
    given = parse_head(None, 6, 8, run_dir=run, tau=0.3).extraction
    assert given == Extraction("grow-diag", 0.3, 8.0, 30, 30, 0.9)
    off = parse_head(None, 6, 8, run_dir=run, diagonal=0, alike=0.0).extraction
    assert off == Extraction("grow-diag", 0.15, 0.0, 30, 30, 0.0) and off.name == "grow-diag 0.15"
    with pytest.raises(UserError, match="--mode shift goes with --head L:H or L; the default"):
        parse_head(None, 6, 8, run_dir=run, mode="shift")


def test_a_merged_pair_reads_the_heads_it_was_tuned_for_and_only_those(tmp_path) -> None:
    from transformer_mt.align.reading import MERGED_RECORD, tuned_pair

    run = tmp_path / "run"
    forward, reverse = HeadReading(6, None), HeadReading(6, None)  # each run's own default
    assert tuned_pair(run, forward, reverse, named=False) == (forward, reverse, None)
    tuned = Extraction("grow-diag", 0.1, 8.0, 50, 20, 0.9)
    ours, theirs = HeadReading(1, 1, "shift", tuned), HeadReading(1, 1, "shift", Extraction())
    ReadingRecord(ours, "dev", [], theirs).save(record_folder(run), MERGED_RECORD)
    # nothing named: the record's two heads, read as tuned, whatever each run's default
    assert tuned_pair(run, forward, reverse, named=False) == (ours, theirs, tuned)
    # the same heads named: still tuned; another head on either side: nothing tuned for it
    named = HeadReading(1, 1, "shift")
    assert tuned_pair(run, named, HeadReading(1, 1, "shift"), named=True)[2] == tuned
    assert tuned_pair(run, HeadReading(2, 1, "shift"), named, named=True)[2] is None
    assert tuned_pair(run, named, HeadReading(1, 1, "causal"), named=True)[2] is None


def test_a_guided_head_is_built_once_from_align_config() -> None:
    align = AlignConfig(guided=True, layer=-1, head=2, mode="shift")
    assert HeadReading.from_config(align, 3, 4) == HeadReading(3, 2, "shift")
    with pytest.raises(UserError, match=r"align.layer=5 / align.head=1: layer 5: the model has"):
        HeadReading.from_config(AlignConfig(layer=5), 3, 4)
    with pytest.raises(UserError, match="align.mode must be one of causal, shift, full"):
        AlignConfig(mode="sideways")
