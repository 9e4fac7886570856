"""Decode and score a trained run: ``python scripts/evaluate.py run_dir=<run> [ckpt.average_last=5] [decode=greedy]``."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from transformer_mt.cli import refuse_unquoted_equals, report_user_errors
from transformer_mt.config import register_configs
from transformer_mt.evaluate import evaluate

register_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
@report_user_errors  # bad input: one line, no Hydra traceback; bugs keep theirs
def main(cfg: DictConfig) -> None:
    evaluate(cfg)


if __name__ == "__main__":
    refuse_unquoted_equals(sys.argv[1:])  # before Hydra, whose message would not name it
    main()
