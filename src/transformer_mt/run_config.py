"""A run's saved ``config.yaml``, read in one place, and the options that were removed.

An option that an experiment showed does not help is removed (docs/experiments.md keeps its
figures and the last commit that had it). ``REMOVED`` names each with the value every run had
unless told otherwise and what to do instead. A command line that sets one, or a run to be
resumed that was trained with another value, is refused with that message; a saved run that
holds the usual value reads as today's runs do.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer_mt.errors import UserError

# key -> (the value every run had unless told otherwise, what to do instead)
REMOVED: dict[str, tuple[object, str]] = {
    "data.eflomal_links": (
        "gdfa",
        "guided alignment learns from eflomal's grow-diag-final-and links (one direction alone "
        "gave no gain)",
    ),
    "data.eflomal_tokenize": (
        "none",
        "eflomal aligns the words as they are (Moses-tokenized words did not make the guided "
        "head better; benchmarks/alignment_aer.py --eflomal-tokenize moses still scores that "
        "baseline)",
    ),
    "trainer.compile_dynamic": (
        False,
        "trainer.compile=true rounds batch widths to data.pad_multiple (symbolic widths ran at "
        "0.92x eager)",
    ),
    "data.concat.boundary": (
        "sep",
        "joined parts are always separated by <s> on both sides (keeping each part's EOS cost "
        "0.9 BLEU; dropping it did not buy that back)",
    ),
    "data.concat.max_len": (
        None,
        "joined examples stop at data.max_len (joined inputs up to 160 pieces lost 7.5 BLEU and "
        "aligned worse at equal steps)",
    ),
    "data.concat.until_step": (
        None,
        "joined examples are drawn at every step (stopping them at a step served no recipe: "
        "+0.04 to -0.29 BLEU at the 35-minute budget)",
    ),
    "model.pad_id": (
        0,
        "the padding id is vocab.PAD_ID, shared by the tokenizer, batches and loss",
    ),
    "align.threshold": (None, "grow-diag's threshold is align.tau"),
    "align.shift": (False, "align.mode=shift says it"),
    "align.full_context": (False, "align.mode=full says it"),
}


# command-line flags of scripts/align.py and scripts/translate.py -> what to do instead
REMOVED_FLAGS: dict[str, str] = {
    "--symmetrize": "--reverse-run merges the two heads' matrices by their geometric mean, read "
    "by grow-diag at the pair's tuned tau, which beat every other combination",
    "--threshold": "grow-diag's threshold is --tau (the plain threshold reading lost to it)",
    "--save-dir": "a run's records are always kept in RUN/align, where every command looks",
    "--layer": "--head L reads layer L's heads averaged",
}


def removed_message(key: str) -> str:
    if key in REMOVED_FLAGS:
        return f"{key} was removed: {REMOVED_FLAGS[key]} (docs/experiments.md)"
    return f"{key} was removed: {REMOVED[key][1]}; its figures are in docs/experiments.md"


def refuse_removed(arguments: Iterable[str], flags: bool = False) -> None:
    """A command line's ``key=value`` (``+key=``, ``~key``) of a removed option, or with
    ``flags`` a removed ``--flag`` of a script: a UserError."""
    for argument in arguments:
        key = argument.lstrip("+~").split("=", 1)[0]
        if key in REMOVED or (flags and key in REMOVED_FLAGS):
            raise UserError(removed_message(key))


def run_folder(path: str | Path) -> Path:
    """The run directory of ``path``: itself, or the run a checkpoint file belongs to."""
    path = Path(path)
    if path.is_dir():
        return path
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


def load_run_config(run_dir: str | Path, resuming: bool = False) -> DictConfig:
    """``RUN_DIR/config.yaml`` (of a run directory, or of the run a checkpoint belongs to) in
    today's keys.

    A removed option at its usual value is dropped. At another value the run was trained in a
    way that no longer exists: resuming it is refused, and so is reading its ``align`` block
    (how its heads are read); decoding and scoring its model drop the key.
    """
    path = run_folder(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"{run_dir} has no config.yaml; pass a run directory written by scripts/train.py"
        )
    cfg = OmegaConf.load(path)
    for key, (usual, _) in REMOVED.items():
        where, _, name = key.rpartition(".")
        block = OmegaConf.select(cfg, where)
        if not isinstance(block, DictConfig) or name not in block:
            continue
        if block[name] != usual and (resuming or where == "align"):
            raise UserError(
                f"{path}: {key}={block[name]}: this run was trained with an option that "
                f"{removed_message(key)}"
            )
        block.pop(name)
    return cfg
