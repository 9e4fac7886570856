import math

import pytest
import torch

from transformer_mt.model.embeddings import SinusoidalPositionalEncoding, sinusoidal_table


@pytest.mark.parametrize(("pos", "i"), [(0, 0), (1, 0), (7, 3), (50, 10), (99, 31)])
def test_table_matches_the_formula(pos: int, i: int) -> None:
    d = 64
    table = sinusoidal_table(100, d)
    angle = pos / 10000 ** (2 * i / d)
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_encoding_is_a_non_persistent_buffer_with_offsets() -> None:
    pe = SinusoidalPositionalEncoding(8, 20)
    assert "table" not in pe.state_dict() and not list(pe.parameters())
    torch.testing.assert_close(pe(3, offset=5), sinusoidal_table(20, 8)[5:8])
