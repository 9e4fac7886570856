"""How data loader workers start: a fork server that imports only what reading batches needs."""

from __future__ import annotations

import multiprocessing
import multiprocessing.context

# What a worker needs to read and pad batches (a ``TokenRows`` over an Arrow table, and
# ``collate_columns``): loaded once by the fork server, not per worker. Neither Lightning nor
# the data module: workers draw no random numbers (the sampler, in the training process, chose the
# rows), so training seeds them with torch's own per-worker seeds, not Lightning's function.
WORKER_MODULES = ["datasets", "transformer_mt.data.batching"]


def worker_context(num_workers: int) -> multiprocessing.context.BaseContext | None:
    """How loader workers are started: from a fork server, never forked from the training
    process itself.

    By the time a loader starts its workers the training process runs other threads: gloo's,
    the queue feeders and resource sharer of the loaders before it, tqdm's monitor. ``fork``
    copies the locks those threads hold; a worker forked while one was held waits on it forever
    (in CPython's after-fork thread-state cleanup), its rank waits for a batch, and under DDP
    the other ranks wait in their next collective. The fork server is a fresh single-threaded
    interpreter started once, so every worker forked from it starts clean; ``WORKER_MODULES``,
    which it imports first, keep each worker's start short.
    """
    if num_workers == 0 or "forkserver" not in multiprocessing.get_all_start_methods():
        return None  # read in the training process itself; Windows spawns workers (safe)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(WORKER_MODULES)
    return context
