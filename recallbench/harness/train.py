"""One run: train (or only evaluate) one model on one task and return its result record.

    record = run({"task": {...}, "model": {...}, "train": {...}})

The record is plain JSON (schema ``recallbench.result/1``, see
:func:`recallbench.api.record.make_record`): accuracy with its counts, state size,
parameters, steps, wall time, whether the run converged, the resolved config and its hash.
A ``train.lr`` that is a list (or ``auto``) is a learning-rate search
(:mod:`recallbench.harness.lr_search`): every candidate is trained, the best by validation
accuracy is scored on the test set.  The run stops at ``early_stop``, on a plateau
(``train.patience``) or at ``max_steps`` (:mod:`recallbench.harness.convergence`).

Before anything is allocated, the run's memory is estimated and a run that would not
fit is refused (:func:`recallbench.harness.resources.check_memory`, a ConfigError).  A
run whose loss becomes NaN or infinite raises :class:`recallbench.harness.module.DivergedError`.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import torch

from recallbench.api.config import RunConfig, resolve
from recallbench.api.kernels import preflight
from recallbench.api.registry import ADAPTERS
from recallbench.harness.heap import keep_freed_memory
from recallbench.harness.prepare import cpu_threads, pick_device, pick_threads, quiet_lightning
from recallbench.harness.resources import check_memory
from recallbench.harness.single import run_one


def run(config: RunConfig | Mapping[str, Any] | None = None, progress: bool | None = None,
        weights: str | Path | None = None, report=None) -> dict[str, Any]:
    """Train and test one configuration; returns the result record (a dict).

    ``weights``: also save the tested model's ``state_dict`` there (``torch.save``), so that
    ``recallbench probe`` can read the trained model without retraining.  A learning-rate
    search then trains its candidates one by one (the batched ensemble keeps no model).
    ``report``: told of each candidate and step (a
    :class:`recallbench.runs.progress.RunReport`; None: nothing is reported)."""
    cfg = config if isinstance(config, RunConfig) else resolve(config)
    adapter_cls = ADAPTERS.require(cfg.model.adapter)
    device = pick_device(cfg.train.device)
    preflight(adapter_cls, device)  # kernels that cannot run: one line now, not mid-training
    check_memory(cfg, str(device))
    threads = pick_threads(cfg) if device.type == "cpu" else torch.get_num_threads()
    if device.type == "cpu":
        keep_freed_memory()  # no page faults on each step's buffers (harness/heap.py)
    show = cfg.train.progress if progress is None else progress
    start, cpu_start = time.perf_counter(), time.process_time()
    with cpu_threads(threads), quiet_lightning():
        if isinstance(cfg.train.lr, list):
            from recallbench.harness.lr_search import run_search

            record = run_search(cfg, device, show, batched=False if weights else None,
                                weights=weights, report=report)
        else:
            record = run_one(cfg, device, show, weights, report=report)
    record["wall_s"] = round(time.perf_counter() - start, 3)
    record["cpu_s"] = round(time.process_time() - cpu_start, 3)  # every thread of this process
    record["threads"] = threads if device.type == "cpu" else None
    return record


class Reported:
    """:func:`run` with a progress report made for each run: ``reports(cfg)`` (a picklable
    maker, :mod:`recallbench.runs.progress`), as the ``runner`` of
    :func:`recallbench.runs.worker.run_configs`; defined here so that a worker process,
    which preloads its runner's module, preloads this one as it does without a report."""

    def __init__(self, reports):
        self.reports = reports

    def __call__(self, cfg: RunConfig, progress: bool | None = None) -> dict[str, Any]:
        return run(cfg, progress, report=self.reports(cfg))
