"""Train, test and draw: ``python scripts/train.py [model=base] [data=...] [trainer=gpu] [key=value ...]``.

Continue an interrupted run where it stopped, with the configuration it was started with and
any ``key=value`` changes (e.g. more steps): ``python scripts/train.py resume=<run dir> [key=value ...]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from transformer_mt.cli import refuse_unquoted_equals, report_user_errors
from transformer_mt.config import TrainConfig, register_configs
from transformer_mt.errors import UserError
from transformer_mt.run_config import load_run_config, refuse_removed

register_configs()


def resumed_config(run_dir: str, overrides: list[str]) -> DictConfig:
    """The run's saved config.yaml with the command line's ``key=value`` overrides applied."""
    saved = Path(run_dir) / "config.yaml"
    if not saved.is_file():
        raise UserError(
            f"resume={run_dir}: no config.yaml there; pass a run directory written by scripts/train.py"
        )
    changes = [o for o in overrides if not o.startswith(("resume=", "hydra."))]
    groups = [o for o in changes if "." not in o.split("=", 1)[0]]
    if groups:
        raise UserError(
            f"resume={run_dir}: {groups} would swap whole config groups of a run in progress; "
            f"a resumed run keeps its model, data and trainer presets (change single keys instead, "
            f"e.g. trainer.max_steps=200000)"
        )
    schema = OmegaConf.structured(TrainConfig)  # types and keys checked as on a fresh run
    cfg = OmegaConf.merge(
        schema, load_run_config(run_dir, resuming=True), OmegaConf.from_dotlist(changes)
    )
    cfg.resume = str(run_dir)
    return cfg


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
@report_user_errors  # bad input: one line, no Hydra traceback; bugs keep theirs
def main(cfg: DictConfig) -> None:
    if cfg.resume:
        cfg = resumed_config(cfg.resume, list(HydraConfig.get().overrides.task))
    from transformer_mt.train import run  # Lightning's import (seconds) after the checks above

    run(cfg)


if __name__ == "__main__":
    refuse_unquoted_equals(sys.argv[1:])  # before Hydra, whose message would not name it
    report_user_errors(refuse_removed)(sys.argv[1:])  # Hydra would only say "not in struct"
    main()
