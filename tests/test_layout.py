"""The package's layering: the model and the search import no training or config framework."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow  # a fresh interpreter: this process has Hydra loaded already
def test_model_decoding_and_loss_load_without_hydra_omegaconf_or_lightning() -> None:
    # A fresh interpreter: this test process has Hydra loaded already (conftest).
    code = (
        "import sys, transformer_mt, transformer_mt.model, transformer_mt.decoding, transformer_mt.loss; "
        "print(sorted({'hydra', 'omegaconf', 'lightning', 'datasets'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
