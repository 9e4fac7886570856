"""Every command line's bad input, one contract: exit status 2, one stderr line ``error: ...``
naming the file, key or value, and no traceback. Bugs keep theirs."""

from __future__ import annotations

import os
import shutil
import subprocess
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from transformer_mt import Transformer
from transformer_mt.model.config import TransformerConfig

from .conftest import ROOT
from .scripts import run_script

SCRIPTS = ROOT / "scripts"


@pytest.fixture(scope="module")
def paths(demo_run, tmp_path_factory) -> SimpleNamespace:
    """A copy of the demo run (nothing recorded for --head best) and the bad inputs."""
    tmp = tmp_path_factory.mktemp("cli_errors")
    run = tmp / "run"
    shutil.copytree(demo_run, run, ignore=shutil.ignore_patterns("align", "ct2", "*.png"))
    (tmp / "not_a_run").mkdir()
    (tmp / "src.txt").write_text("el gato negro\nla casa\n", encoding="utf-8")
    (tmp / "tgt.txt").write_text("the black cat\nthe house\n", encoding="utf-8")
    (tmp / "empty.wa").write_bytes(b"")
    (tmp / "latin1.wa").write_bytes("0-0 1-2\n0-0 1\xe9-1\n".encode("latin1"))
    (tmp / "possible_only.wa").write_text("0p0 1p2\n0p0 1p1\n", encoding="utf-8")
    # the same run's checkpoint with another d_ff: not the same model
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    ckpt["hyper_parameters"]["model"]["d_ff"] += 1
    torch.save(ckpt, tmp / "other.ckpt")
    # an export that exists already
    (tmp / "ct2_existing").mkdir()
    (tmp / "ct2_existing" / "model.bin").write_bytes(b"x")
    # a run trained with an option since removed
    removed = tmp / "removed_run"
    shutil.copytree(run, removed, ignore=shutil.ignore_patterns("*.ckpt"))
    saved = OmegaConf.load(removed / "config.yaml")
    saved.data.eflomal_tokenize = "moses"
    OmegaConf.save(saved, removed / "config.yaml")
    # a pre-LN run (random weights of the demo's shape), which Transformers' Marian cannot hold
    pre_ln = tmp / "pre_ln_run"
    shutil.copytree(run, pre_ln, ignore=shutil.ignore_patterns("*.ckpt"))
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    shape = {**ckpt["hyper_parameters"]["model"], "norm_first": True}
    ckpt["hyper_parameters"]["model"] = shape
    weights = Transformer(TransformerConfig(**shape)).state_dict()
    ckpt["state_dict"] = {f"model.{k}": v for k, v in weights.items()}
    torch.save(ckpt, pre_ln / "checkpoints" / "last.ckpt")
    return SimpleNamespace(
        tmp=tmp,
        run=run,
        missing=tmp / "no_such_run",
        not_a_run=tmp / "not_a_run",
        removed_run=removed,
        pre_ln_run=pre_ln,
    )


def _align_gold(p, gold: str) -> list:
    return [p.run, "--src", p.tmp / "src.txt", "--tgt", p.tmp / "tgt.txt", "--gold", p.tmp / gold]


# id: (script, arguments from the paths, environment changes, what the message must name)
CASES = {
    "train resume= a missing directory": (
        "train.py",
        lambda p: [f"resume={p.missing}"],
        {},
        r"resume=.*no_such_run: no config\.yaml there",
    ),
    "train resume= a directory that is not a run": (
        "train.py",
        lambda p: [f"resume={p.not_a_run}"],
        {},
        r"resume=.*not_a_run: no config\.yaml there",
    ),
    "train resume= swapping a config group": (
        "train.py",
        lambda p: [f"resume={p.run}", "model=base"],
        {},
        r"\['model=base'\] would swap whole config groups",
    ),
    "train a recipe without TRANSFORMER_MT_DATA": (
        "train.py",
        lambda p: ["experiment=anki_es_en_cpu", f"hydra.run.dir={p.tmp / 'anki'}"],
        {"TRANSFORMER_MT_DATA": None},
        r"TRANSFORMER_MT_DATA",
    ),
    # the README's "to GPUs" line on a laptop: CUDA_VISIBLE_DEVICES="" hides any GPU there is
    "train trainer=gpu on a machine without a GPU": (
        "train.py",
        lambda p: ["trainer=gpu", f"hydra.run.dir={p.tmp / 'gpu'}"],
        {"CUDA_VISIBLE_DEVICES": ""},
        r"trainer.accelerator=gpu \(trainer=gpu and trainer=ddp\): no GPU is usable here.*trainer=cpu",
    ),
    "train more devices than the machine has": (
        "train.py",
        lambda p: ["trainer=ddp_cpu", "trainer.devices=4096", f"hydra.run.dir={p.tmp / 'many'}"],
        {},
        r"trainer.devices=4096 asks for 4096 CPU cores, but this machine has \d+",
    ),
    "train final.splits naming a test set the data lacks": (
        "train.py",
        lambda p: ["final.splits=[test,test2017]", f"hydra.run.dir={p.tmp / 'final'}"],
        {},
        r"final.splits names test2017, which data=demo_es_en does not hold \(it has test\)",
    ),
    "train final.average_last of zero checkpoints": (
        "train.py",
        lambda p: [
            "final.splits=[test]",
            "final.average_last=[0,5]",
            f"hydra.run.dir={p.tmp / 'avg'}",
        ],
        {},
        r"final.average_last=\[0, 5\]: give the checkpoint counts to try, each 1 or more",
    ),
    "evaluate split= a test set the data lacks": (
        "evaluate.py",
        lambda p: [f"run_dir={p.run}", "split=test2017"],
        {},
        r"split=test2017: data=demo_es_en has train, valid, test; further test sets come from",
    ),
    "train trainer.num_nodes with no cluster environment": (
        "train.py",
        lambda p: ["trainer.num_nodes=2", f"hydra.run.dir={p.tmp / 'nodes'}"],
        {k: None for k in ("SLURM_NTASKS", "SLURM_JOB_NAME", "MASTER_ADDR", "WORLD_SIZE")},
        r"trainer.num_nodes=2, but no cluster environment is set.*sbatch scripts/slurm/train.sbatch",
    ),
    "evaluate launched as several processes": (
        "evaluate.py",
        lambda p: [f"run_dir={p.run}"],
        {"WORLD_SIZE": "2"},
        r"scripts/evaluate.py decodes on one device, but it was launched as 2 processes",
    ),
    "translate launched as several processes": (
        "translate.py",
        lambda p: [p.run],
        {"SLURM_STEP_NUM_TASKS": "2"},
        r"scripts/translate.py decodes on one device, but it was launched as 2 processes",
    ),
    "train pairs longer than the model's positions": (
        "train.py",
        lambda p: ["data.max_len=2000", "data.max_tokens=4096", f"hydra.run.dir={p.tmp / 'long'}"],
        {},
        r"data.max_len=2000 pieces need 2001 positions, but model.max_positions=\d+; "
        r"lower data.max_len or raise model.max_positions",
    ),
    "train a removed option": (
        "train.py",
        lambda p: ["data.eflomal_tokenize=moses", f"hydra.run.dir={p.tmp / 'removed'}"],
        {},
        r"data.eflomal_tokenize was removed: eflomal aligns the words as they are",
    ),
    "train resume= a run trained with a removed option": (
        "train.py",
        lambda p: [f"resume={p.removed_run}"],
        {},
        r"config.yaml: data.eflomal_tokenize=moses: this run was trained with an option that",
    ),
    "evaluate a missing run": (
        "evaluate.py",
        lambda p: [f"run_dir={p.missing}", f"hydra.run.dir={p.tmp / 'eval'}"],
        {},
        r"no_such_run has no config\.yaml",
    ),
    "evaluate length_penalties with greedy search": (
        "evaluate.py",
        lambda p: [
            f"run_dir={p.run}",
            "decode=greedy",
            "length_penalties=[0.6,1.0]",
            f"hydra.run.dir={p.tmp / 'eval'}",
        ],
        {},
        r"length_penalties needs beam search, not decode\.beam_size=1",
    ),
    "evaluate length_penalties empty": (
        "evaluate.py",
        lambda p: [f"run_dir={p.run}", "length_penalties=[]", f"hydra.run.dir={p.tmp / 'eval'}"],
        {},
        r"length_penalties=\[\] is empty",
    ),
    "evaluate averaging that ends at a checkpoint named without a step": (
        "evaluate.py",
        lambda p: [
            f"run_dir={p.run}",
            f"ckpt.path={p.tmp / 'other.ckpt'}",
            "ckpt.average_last=2",
            f"hydra.run.dir={p.tmp / 'eval'}",
        ],
        {},
        r"other\.ckpt: its name carries no step .*ckpt\.average_last=1",
    ),
    "evaluate a checkpoint name holding '=', unquoted": (
        "evaluate.py",
        lambda p: [f"run_dir={p.run}", f"ckpt.path={p.run}/checkpoints/epoch=0-step=8.ckpt"],
        {},
        r"ckpt\.path=.*epoch=0-step=8\.ckpt: the value holds '=',.*\"ckpt\.path='.*step=8\.ckpt'\"",
    ),
    "train a run folder holding '=', unquoted": (
        "train.py",
        lambda p: [f"hydra.run.dir={p.tmp}/lr=0.1"],
        {},
        r"hydra\.run\.dir=.*lr=0\.1: the value holds '='.* quote the value",
    ),
    "translate a missing run": (
        "translate.py",
        lambda p: [p.missing, "--input", p.tmp / "src.txt"],
        {},
        r"no checkpoint at .*no_such_run",
    ),
    "translate a missing --input": (
        "translate.py",
        lambda p: [p.run, "--input", p.tmp / "nothing.txt"],
        {},
        r"nothing\.txt: no such file",
    ),
    "translate --n-best over --beam": (
        "translate.py",
        lambda p: [p.run, "--beam", "2", "--n-best", "3", "--input", p.tmp / "src.txt"],
        {},
        r"--n-best 3 cannot exceed --beam 2",
    ),
    "translate --head out of range": (
        "translate.py",
        lambda p: [p.run, "--alignments", "--head", "9:1", "--input", p.tmp / "src.txt"],
        {},
        r"--head '9:1': layer 9: the model has layers 1\.\.2",
    ),
    "translate --head best without a recorded choice": (
        "translate.py",
        lambda p: [p.run, "--alignments", "--head", "best", "--input", p.tmp / "src.txt"],
        {},
        r"--head best: .*reading\.json does not exist: choose a head on development data",
    ),
    "translate --tau with argmax": (
        "translate.py",
        lambda p: [p.run, "--alignments", "--method", "argmax", "--tau", "0.2"],
        {},
        r"alignment method argmax takes no tau; it is for grow-diag",
    ),
    "translate --threshold, removed": (
        "translate.py",
        lambda p: [p.run, "--alignments", "--threshold", "0.2", "--input", p.tmp / "src.txt"],
        {},
        r"--threshold was removed: grow-diag's threshold is --tau",
    ),
    "translate --mode with --head guided": (
        "translate.py",
        lambda p: [p.run, "--alignments", "--head", "best", "--mode", "shift"],
        {},
        r"--mode shift goes with --head L:H or L; --head best brings its own",
    ),
    "align --tune-on without a format": (
        "align.py",
        lambda p: [p.run, "--tune-on", p.tmp / "dev.tsv"],
        {},
        r"--tune-on .*dev\.tsv.*: expected xlwa_dev, epps_dev, xlwa:FILE\.tsv or graca:FOLDER",
    ),
    "align --tune-on a test set": (
        "align.py",
        lambda p: [p.run, "--tune-on", "xlwa_dev", "--tune-on", "graca"],
        {},
        r"--tune-on graca: a test set, scored only; tune on xlwa_dev and epps_dev",
    ),
    "align --tune-on with --gold but no --src/--tgt": (
        "align.py",
        lambda p: [p.run, "--tune-on", f"xlwa:{p.tmp / 'dev.tsv'}", "--gold", p.tmp / "gold"],
        {},
        r"--gold scores --src / --tgt: pass them too",
    ),
    "align --symmetrize, removed": (
        "align.py",
        lambda p: [p.run, "--limit", "5", "--reverse-run", p.run, "--symmetrize", "average"],
        {},
        r"--symmetrize was removed: --reverse-run merges the two heads' matrices by "
        r"their geometric mean",
    ),
    "align --reverse-run translating the same way": (
        "align.py",
        lambda p: [p.run, "--limit", "5", "--head", "1", "--reverse-run", p.run],
        {},
        r"--reverse-run .*run translates as .*run does",
    ),
    "align --tau out of range": (
        "align.py",
        lambda p: [p.run, "--limit", "5", "--method", "grow-diag", "--tau", "1.5"],
        {},
        r"alignment tau 1\.5: attention weights are 0\.\.1",
    ),
    "align --layer, removed": (
        "align.py",
        lambda p: [p.run, "--limit", "5", "--layer", "1"],
        {},
        r"--layer was removed: --head L reads layer L's heads averaged",
    ),
    "align a missing run": (
        "align.py",
        lambda p: [p.missing, "--src", p.tmp / "src.txt", "--tgt", p.tmp / "tgt.txt"],
        {},
        r"no checkpoint at .*no_such_run",
    ),
    "align an empty gold file": (
        "align.py",
        lambda p: _align_gold(p, "empty.wa"),
        {},
        r"empty\.wa: the gold file is empty",
    ),
    "align a gold file that is not UTF-8": (
        "align.py",
        lambda p: _align_gold(p, "latin1.wa"),
        {},
        r"latin1\.wa: not UTF-8 text",
    ),
    "align a gold file without sure links": (
        "align.py",
        lambda p: _align_gold(p, "possible_only.wa"),
        {},
        r"--gold \(.*possible_only\.wa\): no sure link in 2 sentence",
    ),
    "plot_alignment a missing run": (
        "plot_alignment.py",
        lambda p: [p.missing, "--src", "el gato"],
        {},
        r"no checkpoint at .*no_such_run",
    ),
    "plot_alignment --head best without a recorded choice": (
        "plot_alignment.py",
        lambda p: [p.run, "--src", "el gato", "--head", "best", "--out", p.tmp / "plot"],
        {},
        r"--head best: .*reading\.json does not exist: choose a head on development data",
    ),
    "explore a directory that is not a run": (
        "explore.py",
        lambda p: [p.not_a_run],
        {},
        r"no checkpoint at .*not_a_run",
    ),
    "export_ct2 a missing run": (
        "export_ct2.py",
        lambda p: [p.missing, "--out", p.tmp / "ct2_new"],
        {},
        r"no_such_run",
    ),
    "export_ct2 over an existing export without --force": (
        "export_ct2.py",
        lambda p: [p.run, "--out", p.tmp / "ct2_existing"],
        {},
        r"ct2_existing.* --force",
    ),
    "export_ct2 an unknown quantization": (
        "export_ct2.py",
        lambda p: [p.run, "--quantization", "int3"],
        {},
        r"--quantization: invalid choice: 'int3'",
    ),
    "export_hf a missing run": (
        "export_hf.py",
        lambda p: [p.missing, "--out", p.tmp / "hf_new"],
        {},
        r"no_such_run does not exist: pass a run directory",
    ),
    "export_hf a run it cannot express exactly": (
        "export_hf.py",
        lambda p: [p.pre_ln_run, "--out", p.tmp / "hf_pre_ln"],
        {},
        r"cannot export to Transformers exactly: model.norm_first=true",
    ),
    "average_checkpoints a missing run": (
        "average_checkpoints.py",
        lambda p: [p.missing, "--last", "2"],
        {},
        r"--last takes exactly one run directory",
    ),
    "average_checkpoints fewer checkpoints than asked": (
        "average_checkpoints.py",
        lambda p: [p.run, "--last", "50"],
        {},
        r"run has \d+ step checkpoints, fewer than the 50 to average",
    ),
    "average_checkpoints a checkpoint of another model": (
        "average_checkpoints.py",
        lambda p: [
            p.run / "checkpoints" / "last.ckpt",
            p.tmp / "other.ckpt",
            "--out",
            p.tmp / "avg.ckpt",
        ],
        {},
        r"other\.ckpt is not the same model as .*last\.ckpt: model\.d_ff: 128 vs 129",
    ),
}


def _run(script: str, args: list, env_changes: dict) -> subprocess.CompletedProcess:
    env = {**os.environ}
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return run_script(script, *args, env=env, timeout=180)


@pytest.fixture(scope="module")
def results(paths) -> dict[str, subprocess.CompletedProcess]:
    """Every case's process, two at a time."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            case: pool.submit(_run, script, args(paths), env)
            for case, (script, args, env, _) in CASES.items()
        }
        return {case: future.result() for case, future in futures.items()}


@pytest.mark.slow  # one process per bad input
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_naming_it(case: str, results) -> None:
    import re

    expected = CASES[case][-1]
    result = results[case]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert re.search(expected, lines[0]), lines[0]


def test_every_script_is_covered_and_reports_user_errors() -> None:
    """A script added to scripts/ joins the contract; one without the decorator fails it."""
    scripts = {path.name for path in SCRIPTS.glob("*.py")}
    assert scripts == {script for script, *_ in CASES.values()}
    for name in scripts:
        assert "@report_user_errors" in (SCRIPTS / name).read_text(), name


def test_a_bug_keeps_its_traceback() -> None:
    """Only bad input is reported in one line: any other exception is a bug and propagates."""
    from transformer_mt.cli import report_user_errors
    from transformer_mt.errors import UserError

    @report_user_errors
    def buggy() -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError, match="a bug"):
        buggy()

    @report_user_errors
    def bad_input() -> None:
        raise UserError("x.txt: empty")

    with pytest.raises(SystemExit) as exit_:
        bad_input()
    assert exit_.value.code == 2


def test_overrides_hydra_reads_pass_the_quoting_check(capsys) -> None:
    from transformer_mt.cli import refuse_unquoted_equals

    refuse_unquoted_equals(
        [
            "ckpt.path='run/epoch=2-step=800.ckpt'",  # quoted
            'ckpt.path="run/epoch=2-step=800.ckpt"',
            r"ckpt.path=run/epoch\=2",  # escaped
            "optim.lr=range(start=1,stop=3)",  # a sweep function's named arguments
            "--config-name=train",
            "length_penalties=[0.6,1.0]",
            "model=base",
            "resume",
        ]
    )
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as stopped:
        refuse_unquoted_equals(["model=base", "+extra.dir=a=b"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "error: +extra.dir=a=b: the value holds '=', which Hydra reads as the start of another "
        "override; quote the value: \"+extra.dir='a=b'\"\n"
    )


@pytest.mark.parametrize(
    "value",
    ["a=b", "run/epoch=2-step=800.ckpt", "it's=b", 'say "x"=y', "$HOME/x=1", "a=b!"],
)
def test_the_suggested_quoting_reads_back_as_the_value(value: str, capsys) -> None:
    """What the message says to type, read by bash (quotes, ``$``) and parsed by Hydra, is the
    value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from transformer_mt.cli import refuse_unquoted_equals

    with pytest.raises(SystemExit):
        refuse_unquoted_equals([f"ckpt.path={value}"])
    suggested = capsys.readouterr().err.strip().split("quote the value: ", 1)[1]
    words = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {suggested}"], capture_output=True, text=True, check=True
    ).stdout.split("\0")[:-1]
    (typed,) = words
    override = OverridesParser.create().parse_override(typed)
    assert (override.key_or_group, override.value()) == ("ckpt.path", value)
