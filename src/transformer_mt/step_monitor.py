"""What the training loop reports, kept on the device and read on the host once per report.

At the paper's pace a step takes tens of milliseconds on one GPU; a host read of a device tensor
(``.item()``, ``bool(t)``, ``.tolist()``) makes the CPU wait for every queued kernel, so the next
step cannot be queued behind it. The loss, perplexity, gradient norm and the non-finite-loss guard
are therefore accumulated as device tensors over the steps between two reports
(``trainer.log_every_n_steps``), and read with one ``.tolist()`` per report. Under data
parallelism a report first sums the loss, NLL, target tokens and tokens/s over the ranks (one
small all-reduce per report), so the curves and the progress bar are every rank's, not rank 0's.

``StepReporter`` is the Lightning callback around it: the training step hands it the loss
(``record``), and it logs, shows and guards the steps, so that ``training_step`` only computes
the loss, as in Lightning's own examples.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import lightning as L
import torch
from torch import Tensor

log = logging.getLogger(__name__)

# Positions in the accumulator: sums over the steps since the last report.
LOSS, NLL, TOKENS, BAD, FIRST_BAD_STEP, FIRST_BAD_LOSS, GRAD_NORM, BAD_GRADS = range(8)


@dataclass
class Report:
    """One report's figures, on the host."""

    step: int
    loss: float  # label-smoothed loss per target token, over the finite steps (all ranks')
    ppl: float  # exp(NLL per target token), capped at e^50 (all ranks' tokens)
    tok_s: float  # target tokens per second over whole steps (loader, logging included), summed
    # over the ranks
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
        # fill_ passes -1 to the kernel; `sums[i] = -1.0` would copy it from host memory, which
        # waits for the device
        sums.narrow(0, FIRST_BAD_STEP, 1).fill_(-1.0)
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

    def report(self, step: int, reduce: Callable[[Tensor], Tensor] | None = None) -> Report | None:
        """Read the accumulated figures (one host read) and start a new report; None if empty.

        Args:
            reduce: sums a tensor over the ranks (``trainer.strategy.reduce``): under data
                parallelism the loss and perplexity are then those of every rank's target
                tokens, and tok/s the sum of every rank's rate. Every rank must call it.
        """
        if self.sums is None or not self.padding:
            return None
        now = time.perf_counter()
        rate = self.tokens / max(now - self.started, 1e-9)  # this rank's target tokens/s
        # LOSS, NLL, TOKENS and the rate, summed over the ranks (this rank's alone without reduce)
        shared = torch.cat([self.sums[LOSS : TOKENS + 1], self.sums.new_tensor([rate])])
        if reduce is not None:
            shared = reduce(shared)
        values = torch.cat([self.sums, shared]).tolist()  # the one host read per report
        loss_sum, nll_sum, tokens, rate = values[len(self.sums) :]
        tokens = max(tokens, 1.0)
        first_step = int(values[FIRST_BAD_STEP])
        report = Report(
            step=step,
            loss=loss_sum / tokens,
            ppl=math.exp(min(nll_sum / tokens, 50.0)),
            tok_s=rate,
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


class StepReporter(L.Callback):
    """Training-step figures and the non-finite guard, outside the step.

    Two guards, decided once by ``configure_optimizers`` (``on_device``): with a fused Adam the
    optimizer skips a step on the device when told (``found_inf``, as GradScaler does), so a
    non-finite loss costs no host read and is found at the next report; otherwise ``record``
    reads every step's loss on the host and skips a bad step by returning None.

    Args:
        on_nonfinite_loss: ``stop`` raises on the first non-finite step; ``skip`` counts it,
            warns and goes on.
    """

    def __init__(self, on_nonfinite_loss: str = "stop") -> None:
        self.on_nonfinite_loss = on_nonfinite_loss
        self.on_device = False  # set by the module's configure_optimizers
        self.monitor = StepMonitor()
        self.skipped_steps = 0  # non-finite steps skipped (on_nonfinite_loss=skip)
        self.progress: dict[str, str] = {}  # the last report, for the progress bar
        self._reported_at = -1  # the global step of the last report
        self._step_lr = 0.0  # the learning rate of the step in flight
        self._fit_start = time.perf_counter()

    def record(
        self, module: L.LightningModule, mean: Tensor, nll: Tensor, n_tokens: int, batch, batch_idx
    ) -> Tensor | None:
        """The step's per-token loss ``mean`` (and summed ``nll``), as ``training_step`` returns
        it: ``mean`` itself, or None to skip the step (the host guard)."""
        self._step_lr = module.lr_schedulers().get_last_lr()[0]  # the rate this step trains with
        if not self.on_device:
            finite = bool(torch.isfinite(mean))
            finite = module.trainer.strategy.reduce_boolean_decision(finite, all=True)  # all ranks
            if not finite:
                self._nonfinite(
                    1,
                    f"non-finite training loss ({float(mean)}) at {_where(module, batch, batch_idx)}",
                )
                return None  # Lightning runs no backward and no optimizer step for this batch
            self.monitor.add(mean, nll, n_tokens, module.global_step, "", batch.padding)
            return mean
        # No host read here: a non-finite loss is recorded on the device; its NaN gradients make
        # on_before_optimizer_step skip the update on the device, and report() stops or warns.
        where = _where(module, batch, batch_idx)
        self.monitor.add(mean, nll, n_tokens, module.global_step, where, batch.padding)
        return mean

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if not grads:
            return
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))  # total L2 norm
        self.monitor.grad_norm(norm)
        if self.on_device:
            # Gradients are all-reduced by now: every rank takes the same decision, without a
            # collective or a host read. Adam leaves weights, moments and its step count alone.
            optimizer.found_inf = torch.isfinite(norm).logical_not().float()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        every = trainer.log_every_n_steps
        if trainer.global_step != self._reported_at and trainer.global_step % every == 0:
            self.report(trainer)

    def on_fit_start(self, trainer, pl_module) -> None:
        self._fit_start = time.perf_counter()

    def on_train_start(self, trainer, pl_module) -> None:
        # A resumed session starts at its checkpoint's step, which the run before reported:
        # report again only once a step is done, so a report never covers part of a step
        # (with gradient accumulation) under a step number already logged.
        self._reported_at = trainer.global_step

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.monitor = StepMonitor()  # throughput restarts with the epoch (no loader wait counted)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.report(trainer)  # the steps since the last report, and the guard, before validation
        # Wall-clock minutes since fit started, so curves can be read against time.
        pl_module.log("time/minutes", (time.perf_counter() - self._fit_start) / 60.0)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        # the training minutes at each validation, so its BLEU can be read against time
        if not trainer.sanity_checking:
            pl_module.log("val/minutes", (time.perf_counter() - self._fit_start) / 60.0)

    def report(self, trainer: L.Trainer) -> None:
        """Read the steps since the last report (one host read), log them, and guard."""
        self._reported_at = step = trainer.global_step
        # every rank reports at the same steps: the sum over ranks is a collective they all reach
        report = self.monitor.report(step, lambda t: trainer.strategy.reduce(t, reduce_op="sum"))
        if report is None:
            return
        if self.on_device and (report.bad_steps or report.bad_grad_steps):
            # Every rank sees the non-finite gradients, so all stop (or skip) together; the rank
            # whose loss it was also names the batch.
            count = max(report.bad_steps, report.bad_grad_steps)
            what = (
                f"non-finite training loss ({report.first_bad_loss}) at {report.first_bad_batch}"
                if report.bad_steps
                else f"non-finite gradients in {count} step(s) up to step {step - 1} "
                f"(another rank's loss under DDP, or an overflow in backward)"
            )
            self._nonfinite(count, what)
        metrics = {
            "train/loss": report.loss,
            "train/ppl": report.ppl,
            "train/tok_s": report.tok_s,
            "train/lr": self._step_lr,
            "train/padding": report.padding,
            "train/grad_norm": report.grad_norm,
        }
        if self.skipped_steps:
            metrics["train/skipped"] = float(self.skipped_steps)
        self.progress = {"loss": f"{report.loss:.3f}", "tok/s": f"{report.tok_s:,.0f}"}
        if trainer.is_global_zero:  # host floats straight to the loggers: nothing to read back
            # step: the 0-based index of the last step reported, as Lightning's own logging counts
            for logger in trainer.loggers:
                logger.log_metrics({**metrics, "epoch": trainer.current_epoch}, step=step - 1)

    def _nonfinite(self, count: int, what: str) -> None:
        """Stop, or count and warn, for ``count`` non-finite steps (``what``: the first one)."""
        if self.on_nonfinite_loss == "stop":
            raise FloatingPointError(
                f"{what}. Lower optim.lr_factor, raise optim.warmup, set trainer.gradient_clip_val, "
                f"or use precision=bf16-mixed instead of 16-mixed; trainer.on_nonfinite_loss=skip "
                f"skips such steps instead of stopping"
            )
        self.skipped_steps += count
        log.warning("%s: step skipped (%d so far)", what, self.skipped_steps)


def _where(module: L.LightningModule, batch, batch_idx: int) -> str:
    """The step, epoch, batch and its shape in words (host values only)."""
    return (
        f"step {module.global_step} (epoch {module.current_epoch}, batch {batch_idx} of the "
        f"epoch): {batch.describe()}"
    )
