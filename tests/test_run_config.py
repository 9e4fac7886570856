"""A run's saved config.yaml, read in one place; the removed options refused with what replaced
them, and old runs that held their usual value read as today's."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from transformer_mt.errors import UserError
from transformer_mt.run_config import REMOVED, load_run_config, refuse_removed, run_folder


def _run(tmp_path, yaml: str):
    (tmp_path / "checkpoints").mkdir(exist_ok=True)
    (tmp_path / "config.yaml").write_text(yaml)
    return tmp_path


@pytest.mark.parametrize("key", sorted(REMOVED))
def test_a_removed_option_on_the_command_line_names_what_replaced_it(key: str) -> None:
    refuse_removed(["trainer.max_steps=10", "data=anki_es_en"])
    for override in (f"{key}=x", f"+{key}=x", f"~{key}"):
        with pytest.raises(UserError, match=rf"{key} was removed: .*docs/experiments.md"):
            refuse_removed(["trainer.max_steps=10", override])


def test_old_runs_holding_the_usual_value_read_as_today(tmp_path) -> None:
    """Every run since e5d1fc5 saved data.eflomal_tokenize: none, the runs at 74727c6..66cdb80
    data.concat.max_len: null, and the runs before align.mode the two flags: they load, resume
    and give their checkpoints' run as before."""
    run = _run(
        tmp_path,
        "data:\n  name: demo\n  eflomal_links: gdfa\n  eflomal_tokenize: none\n"
        "  concat:\n    share: 0.15\n    boundary: sep\n    max_len: null\n"
        "trainer:\n  compile_dynamic: false\n"
        "align:\n  guided: true\n  shift: false\n  full_context: false\n",
    )
    for where in (run, run / "checkpoints" / "last.ckpt"):
        cfg = load_run_config(where, resuming=True)
        assert OmegaConf.to_container(cfg) == {
            "data": {"name": "demo", "concat": {"share": 0.15}},
            "trainer": {},
            "align": {"guided": True},
        }
    assert run_folder(run / "checkpoints" / "last.ckpt") == run


@pytest.mark.parametrize(
    ("saved", "key"),
    [
        ("data:\n  eflomal_tokenize: moses\n", "data.eflomal_tokenize"),
        ("data:\n  eflomal_links: forward\n", "data.eflomal_links"),
        ("trainer:\n  compile_dynamic: true\n", "trainer.compile_dynamic"),
        ("data:\n  concat:\n    boundary: eos\n", "data.concat.boundary"),
        ("data:\n  concat:\n    max_len: 160\n", "data.concat.max_len"),
    ],
)
def test_a_run_trained_with_a_removed_option_is_not_resumed_but_decodes(
    tmp_path, saved: str, key: str
) -> None:
    run = _run(tmp_path, saved)
    with pytest.raises(UserError, match=rf"config.yaml: {key}=.*: this run was trained with an"):
        load_run_config(run, resuming=True)
    where, _, name = key.rpartition(".")
    assert name not in OmegaConf.select(load_run_config(run), where)  # decoding needs none


def test_a_head_read_by_a_removed_flag_is_refused_everywhere(tmp_path) -> None:
    """align.shift: true said how the guided head is read: dropping it would read it otherwise."""
    from transformer_mt.align.reading import guided_reading

    run = _run(tmp_path, "align:\n  guided: true\n  layer: 1\n  head: 1\n  shift: true\n")
    with pytest.raises(UserError, match="align.shift=True: .* align.mode=shift says it"):
        load_run_config(run)
    with pytest.raises(UserError, match="align.mode=shift says it"):
        guided_reading(run, 2, 2)
    _run(tmp_path, "align:\n  guided: true\n  layer: 1\n  head: 1\n  shift: false\n")
    assert guided_reading(run, 2, 2).mode == "causal"  # saved before align.mode, no flag set
    # the threshold of a run saved before align.tau: null reads as today, a value is named
    _run(tmp_path, "align:\n  guided: true\n  layer: 1\n  head: 1\n  threshold: null\n")
    assert guided_reading(run, 2, 2).extraction.method == "argmax"
    saved = (
        "align:\n  guided: true\n  layer: 1\n  head: 1\n  extract: grow-diag\n  threshold: 0.2\n"
    )
    _run(tmp_path, saved)
    with pytest.raises(
        UserError, match="align.threshold=0.2: .* grow-diag's threshold is align.tau"
    ):
        guided_reading(run, 2, 2)
    # a guided head read by a removed method is named, with what won
    _run(tmp_path, "align:\n  guided: true\n  layer: 1\n  head: 1\n  extract: intersect\n")
    with pytest.raises(UserError, match="'intersect': choose one of argmax, grow-diag .threshold"):
        guided_reading(run, 2, 2)


def test_a_missing_config_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="has no config.yaml; pass a run directory"):
        load_run_config(tmp_path)
