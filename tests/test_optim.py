import pytest
import torch

from transformer_mt.config import OptimConfig
from transformer_mt.optim import build_optimizer, noam_lambda


@pytest.mark.parametrize(
    ("step", "expected"),
    [(1, 512**-0.5 * 4000**-1.5), (4000, 6.988e-4), (100_000, 512**-0.5 * 100_000**-0.5)],
)
def test_schedule_values(step: int, expected: float) -> None:
    assert noam_lambda(step, 512, 4000) == pytest.approx(expected, rel=1e-3)


def test_schedule_peaks_at_warmup() -> None:
    values = [noam_lambda(s, 512, 4000) for s in range(1, 10_000)]
    assert max(range(len(values)), key=values.__getitem__) + 1 == 4000


def test_optimizer_follows_the_schedule_per_step() -> None:
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer, schedule = build_optimizer([param], OptimConfig(), d_model=512)
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    seen = []
    for _ in range(4000):
        seen.append(optimizer.param_groups[0]["lr"])  # the lr used by this optimizer step
        optimizer.step()
        schedule.step()
    assert seen[0] == pytest.approx(noam_lambda(1, 512, 4000))
    assert seen[3999] == pytest.approx(6.988e-4, rel=1e-3)
