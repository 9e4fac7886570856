"""What the training loop reports, kept on the device and read on the host once per report.

At the paper's pace a step takes tens of milliseconds on one GPU; a host read of a device tensor
(``.item()``, ``bool(t)``, ``.tolist()``) makes the CPU wait for every queued kernel, so the next
step cannot be queued behind it. The loss, perplexity, gradient norm and the non-finite-loss guard
are therefore accumulated as device tensors over the steps between two reports
(``trainer.log_every_n_steps``), and read with one ``.tolist()`` per report.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

# Positions in the accumulator: sums over the steps since the last report.
LOSS, NLL, TOKENS, BAD, FIRST_BAD_STEP, FIRST_BAD_LOSS, GRAD_NORM, BAD_GRADS = range(8)


@dataclass
class Report:
    """One report's figures, on the host."""

    step: int
    loss: float  # label-smoothed loss per target token, over the finite steps
    ppl: float  # exp(NLL per target token), capped at e^50
    tok_s: float  # target tokens per second over whole steps (loader, logging included)
    padding: float  # mean share of padding of the batches
    grad_norm: float  # of the last optimizer step
    bad_steps: int  # steps whose loss was not finite (on this rank)
    bad_grad_steps: int  # optimizer steps whose gradients were not finite (the same on every rank)
    first_bad_step: int  # -1 if none
    first_bad_loss: float
    first_bad_batch: str  # where it was: step, epoch, batch and its shape; "" if none


@dataclass
class StepMonitor:
    """Accumulates per-step figures on the device; ``report()`` reads them once and starts over."""

    sums: Tensor | None = None  # (8,), see the positions above
    tokens: int = 0  # target tokens, counted on the host when batches are collated
    padding: list[float] = field(default_factory=list)
    batches: dict[int, str] = field(default_factory=dict)  # step -> where: step, epoch, batch
    started: float = field(default_factory=time.perf_counter)

    def _zeros(self, device: torch.device) -> Tensor:
        sums = torch.zeros(8, device=device)
        sums[FIRST_BAD_STEP] = -1.0
        return sums

    def add(
        self, mean: Tensor, nll: Tensor, n_tokens: int, step: int, batch: str, padding: float
    ) -> None:
        """Record one micro-batch: ``mean`` loss per token, summed ``nll``; no host read."""
        if self.sums is None:
            self.sums = self._zeros(mean.device)
        mean, nll = mean.detach().float(), nll.detach().float()
        finite = torch.isfinite(mean)
        first = finite.logical_not() & (self.sums[BAD] == 0)  # the first bad step of this report
        zero = torch.zeros((), device=mean.device)
        update = torch.stack(
            [
                torch.where(finite, mean * n_tokens, zero),
                torch.where(finite, nll, zero),
                finite.float() * n_tokens,
                finite.logical_not().float(),
                torch.where(first, step + 1.0, zero),  # +1: where() adds to -1
                torch.where(first, mean, zero),
                zero,
                zero,
            ]
        )
        self.sums += update  # in place: one small kernel, nothing leaves the device
        self.tokens += n_tokens
        self.padding.append(padding)
        self.batches[step] = batch

    def grad_norm(self, norm: Tensor) -> None:
        """The total gradient norm of the step about to be taken (a device scalar).

        Gradients are all-reduced before this, so every rank counts the same non-finite steps
        here, even when only one rank's loss was not finite.
        """
        if self.sums is None:
            self.sums = self._zeros(norm.device)
        norm = norm.detach().float()
        self.sums[GRAD_NORM] = norm
        self.sums[BAD_GRADS] += torch.isfinite(norm).logical_not().float()

    def report(self, step: int) -> Report | None:
        """Read the accumulated figures (one host read) and start a new report; None if empty."""
        if self.sums is None or not self.padding:
            return None
        values = self.sums.tolist()  # the one host read per report
        now = time.perf_counter()
        tokens = max(values[TOKENS], 1.0)
        first_step = int(values[FIRST_BAD_STEP])
        report = Report(
            step=step,
            loss=values[LOSS] / tokens,
            ppl=math.exp(min(values[NLL] / tokens, 50.0)),
            tok_s=self.tokens / max(now - self.started, 1e-9),
            padding=sum(self.padding) / len(self.padding),
            grad_norm=values[GRAD_NORM],
            bad_steps=int(values[BAD]),
            bad_grad_steps=int(values[BAD_GRADS]),
            first_bad_step=first_step,
            first_bad_loss=values[FIRST_BAD_LOSS],
            first_bad_batch=self.batches.get(first_step, ""),
        )
        self.sums = self._zeros(self.sums.device)
        self.tokens, self.padding, self.batches, self.started = 0, [], {}, now
        return report
