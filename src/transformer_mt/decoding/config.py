"""Search settings (a plain dataclass: no Hydra here); presets in ``conf/decode``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DecodeConfig:
    """Search settings for validation and test (§6.1: beam 4, α 0.6, max length |x| + 50)."""

    beam_size: int = 1  # 1 = greedy
    length_penalty: float = 0.6  # α of ((5 + |Y|) / 6)^α
    max_len_a: float = 1.0  # max output length = a · |X| + b
    max_len_b: int = 50
    batch_size: int = 128  # sentences decoded at once
