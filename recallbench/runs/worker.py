"""What runs in a worker: one work item (a list of configs) in, one record per config out.

A work item is one point, or with ``--ensemble K`` up to K points of the same shape trained
as one batched model (:mod:`recallbench.harness.ensemble`).  :func:`run_configs` never
raises for a failing point: the point gets a failed record whose ``error`` is the
exception's one-line :func:`reason`.  Every executor (:mod:`recallbench.runs.executors`)
calls it, in this process or in a worker process.
"""
from __future__ import annotations

import os
from typing import Callable

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def reason(exc: BaseException) -> str:
    """``Type: first line of the message``, at most 500 characters: a record's ``error``."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line[:500]


def set_threads(threads: int | None) -> None:
    """Torch threads of this process (workers call it once at start)."""
    if not threads:
        return
    for var in THREAD_ENV:
        os.environ[var] = str(threads)
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # only allowed before any parallel work; harmless to skip
        pass


def run_configs(configs: list[dict], threads: int | None = None, ensemble: bool = False,
                runner: Callable | None = None, reraise: tuple[type[Exception], ...] = ()
                ) -> list[dict]:
    """Run one work item; a failing point gets a failed record instead of raising.

    ``configs`` are canonical config dicts (``RunConfig.to_dict()``), resolved here again.
    ``runner(cfg, progress=False)`` runs one point (default :func:`recallbench.harness.train.run`);
    exceptions of the types in ``reraise`` are not recorded but propagate.
    """
    from recallbench.api.config import resolve

    cfgs = []
    for raw in configs:
        cfg = resolve(raw)
        cfg.train.progress = False
        if threads:
            cfg.train.threads = threads  # not hashed: the point keeps its config_hash
        cfgs.append(cfg)
    if ensemble:
        return _run_ensemble(cfgs)
    if runner is None:
        from recallbench.harness.train import run as runner
    from recallbench.api.record import failed_record

    records = []
    for cfg in cfgs:
        try:
            records.append(runner(cfg, progress=False))
        except reraise:
            raise
        except Exception as exc:  # DivergedError, UnavailableError, a plugin's bug, ...
            records.append(failed_record(cfg, reason(exc)))
    return records


def _run_ensemble(cfgs: list) -> list[dict]:
    """The configs as one batched model; if the batch fails, every member is failed."""
    from recallbench.api.record import failed_record
    from recallbench.harness.ensemble import run_ensemble

    try:
        records = run_ensemble(cfgs, progress=False)
        if len(records) != len(cfgs):
            raise RuntimeError(f"run_ensemble returned {len(records)} records "
                               f"for {len(cfgs)} configs")
        return list(records)
    except Exception as exc:
        return [failed_record(cfg, f"ensemble of {len(cfgs)}: {reason(exc)}") for cfg in cfgs]
