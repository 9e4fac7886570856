"""Search settings (a plain dataclass: no Hydra here); presets in ``conf/decode``."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_mt.errors import UserError

ENGINES = ("torch", "ct2")


@dataclass
class DecodeConfig:
    """Search settings for validation and test (§6.1: beam 4, α 0.6, max length |x| + 50)."""

    beam_size: int = 1  # 1 = greedy
    length_penalty: float = 0.6  # α of ((5 + |Y|) / 6)^α
    length_norm: str = "gnmt"  # gnmt: ((5 + |Y|) / 6)^α; power: |Y|^α (CTranslate2's, fairseq's)
    max_len_a: float = 1.0  # max output length = a · |X| + b
    max_len_b: int = 50
    batch_size: int = 128  # sentences decoded at once
    # scripts/evaluate.py and translate.py: "torch" (this package's search) or "ct2" (CTranslate2,
    # an export of scripts/export_ct2.py: ct2_dir, default <run_dir>/ct2; pip install -e ".[ct2]")
    engine: str = "torch"
    ct2_dir: str | None = None
    quantize: str | None = None  # torch engine on CPUs: int8 (dynamic quantization of every Linear)
    # torch engine: the cached decoder step as a torch.compile graph (decoding/compiled.py); the
    # same tokens; the first batches of each shape compile (seconds), see docs/decoding.md
    compile: bool = False

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise UserError(f"decode.engine={self.engine!r}: use torch or ct2")
        if self.quantize not in (None, "int8"):
            raise UserError(f"decode.quantize={self.quantize!r}: use int8 or null")
        if self.compile and self.engine != "torch":
            raise UserError(
                f"decode.compile=true is for decode.engine=torch; {self.engine} runs its own kernels"
            )
        if self.length_norm not in ("gnmt", "power"):
            raise UserError(f"decode.length_norm={self.length_norm!r}: use gnmt or power")
