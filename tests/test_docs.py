"""The guides cannot rot: every Python block of the README and docs/ runs on the demo model, and
every ``python scripts/...`` or ``python benchmarks/...`` command they show parses (argparse
flags exist, Hydra overrides compose, no removed option). docs/experiments.md and the GPU
reports are history: their commands are as they were run at their commit."""

from __future__ import annotations

import argparse
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from transformer_mt.run_config import refuse_removed

from .conftest import CONF, ROOT

HISTORY = {"experiments.md"}
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"] + [
    p
    for p in sorted((ROOT / "docs").glob("*.md"))
    if p.name not in HISTORY and not p.name.startswith("gpu_check")
]
HYDRA = {"scripts/train.py": "train", "scripts/evaluate.py": "evaluate"}
DEMO = "outputs/demo_es_en/tiny/<date_time>"


def _blocks(path: Path, languages: tuple[str, ...]) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [
        m.group(2)
        for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S)
        if m.group(1) in languages
    ]


def _commands() -> list[tuple[str, str]]:
    """(doc, command) for every command line of a script the docs show, in code blocks and in
    inline code, continuations joined, comments, pipes and redirections cut off."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        lines = [
            line
            for block in _blocks(doc, ("bash", "sh", ""))
            for line in block.replace("\\\n", " ").splitlines()
        ]
        lines += re.findall(r"(?<!`)`(python (?:scripts|benchmarks)/[^`]+)`", text)
        for line in lines:
            line = re.split(r"\s#\s", line)[0]
            for part in re.split(r"&&|;|\|(?!\|)| < | > ", line):
                part = part.strip()
                if re.match(r"python (scripts|benchmarks)/\w+\.py", part):
                    found.append((doc.name, part))
    return found


COMMANDS = _commands()


def _arguments(command: str) -> tuple[str, list[str]]:
    """The script and its arguments, as the shell would pass them: variables stand for a path,
    and an optional ``[...]`` is taken."""
    command = re.sub(r"\$\{?(TRANSFORMER_MT_DATA|DATA)\}?", "/data", command)
    command = re.sub(r"<[\w ]+>", "PLACEHOLDER", command)  # <run>, <date_time>: the user's own
    words = shlex.split(command)
    args = []
    for word in words[2:]:
        if word.startswith("[") and "=[" not in word:
            word = word.lstrip("[")
        if word.endswith("]") and "=[" not in word and "[" not in word:
            word = word.rstrip("]")
        if word == "...":  # elided: a flag's value, or the rest of the line
            word = "PLACEHOLDER" if args and args[-1].startswith("-") else ""
        if word:
            args.append(word)
    return words[1], args


class _Parsed(Exception):
    pass


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS) > 50
    assert {doc for doc, _ in COMMANDS} >= {"README.md", "attention.md", "training.md"}


@pytest.mark.parametrize(("doc", "command"), COMMANDS, ids=[f"{d}: {c}" for d, c in COMMANDS])
def test_every_command_in_the_docs_parses(doc: str, command: str, monkeypatch) -> None:
    script, args = _arguments(command)
    assert (ROOT / script).is_file(), f"{doc}: {script} does not exist"
    refuse_removed(args)
    if script in HYDRA:
        overrides = [a for a in args if not a.startswith(("-", "hydra."))]
        if "-m" in args or "--multirun" in args:  # a sweep: each value composes on its own
            overrides = [o for o in overrides if not re.search(r"=.*(,|glob\(|range\()", o)]
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            compose(HYDRA[script], overrides=overrides)
        return
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))  # a bad flag exits 2 before this

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "argv", [str(ROOT / script), *args])
    monkeypatch.syspath_prepend(str((ROOT / script).parent))  # as python script.py does
    with pytest.raises(_Parsed):
        runpy.run_path(str(ROOT / script), run_name="__main__")


PYTHON_BLOCKS = [(doc.name, block) for doc in DOCS for block in _blocks(doc, ("python",))]


@pytest.mark.slow  # on the demo model
@pytest.mark.parametrize(("doc", "block"), PYTHON_BLOCKS, ids=[d for d, _ in PYTHON_BLOCKS])
def test_every_python_block_in_the_docs_runs_on_the_demo_model(doc, block, demo_run) -> None:
    code = block.replace(DEMO, str(demo_run)).replace("<run>", str(demo_run))
    exec(compile(code, f"{doc} (a python block)", "exec"), {"__name__": "docs"})
