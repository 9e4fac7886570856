"""Train, test and draw: ``python scripts/train.py [model=base] [data=...] [trainer=gpu] [key=value ...]``."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from transformer_mt.config import register_configs
from transformer_mt.train import run

register_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
