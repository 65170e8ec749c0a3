"""What runs in a worker: one work item (a list of configs) in, one record per config out.

A work item is one point, or with ``--ensemble K`` up to K points of the same shape trained
as one batched model (:mod:`recallbench.harness.ensemble`).  :func:`run_configs` never
raises for a failing point: the point gets a failed record whose ``error`` is the
exception's one-line :func:`~recallbench.api.errors.reason`.  Every executor (:mod:`recallbench.runs.executors`)
calls it, in this process or in a worker process.
"""
from __future__ import annotations

import os
from typing import Callable

from recallbench.api.errors import reason

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


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


def init_worker(threads: int | None, parent_pid: int) -> None:
    """A pool worker's start: its torch threads, and its death with the driver.

    A worker never outlives the driver ``parent_pid`` that started it: on Linux the kernel
    sends it SIGKILL when the driver dies (``prctl(PR_SET_PDEATHSIG)``; the signal comes when
    the driver *thread* that started the pool ends, so a pool belongs to a thread that
    outlives it), and everywhere a watchdog thread exits the process once its parent is no
    longer ``parent_pid``.  Ctrl-C is the driver's to handle (it stops the workers), so a
    worker ignores SIGINT, and it exits at once on SIGTERM, mid-point or idle.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))
    _parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:  # the driver died before the signal was set
        os._exit(1)
    _watch_parent(parent_pid)
    set_threads(threads)


def _parent_death_signal(signum: int) -> None:
    """Linux: have the kernel send ``signum`` to this process when its parent dies."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signum, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no libc prctl: the watchdog alone stands guard
        pass


def _watch_parent(parent_pid: int, poll_s: float = 0.5) -> None:
    """A daemon thread that exits the process once its parent is no longer ``parent_pid``."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="recallbench-watch-parent", daemon=True).start()


def run_configs(configs: list[dict], threads: int | None = None, ensemble: bool = False,
                runner: Callable | None = None, reraise: tuple[type[Exception], ...] = (),
                compile: str | None = None) -> list[dict]:
    """Run one work item; a failing point gets a failed record instead of raising.

    ``configs`` are canonical config dicts (``RunConfig.to_dict()``), resolved here again.
    ``runner(cfg, progress=False)`` runs one point (default :func:`recallbench.harness.train.run`);
    exceptions of the types in ``reraise`` are not recorded but propagate.  ``compile``:
    an ensemble's compile mode (:mod:`recallbench.harness.ensemble.compile`).
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
        return _run_ensemble(cfgs, compile)
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


def _run_ensemble(cfgs: list, compile: str | None = None) -> list[dict]:
    """The configs as one batched model; if the batch fails, every member is failed."""
    from recallbench.api.record import failed_record
    from recallbench.harness.ensemble import run_ensemble

    try:
        # compile only when asked: the ensemble module may be one without the keyword
        records = run_ensemble(cfgs, progress=False, **({"compile": compile} if compile else {}))
        if len(records) != len(cfgs):
            raise RuntimeError(f"run_ensemble returned {len(records)} records "
                               f"for {len(cfgs)} configs")
        return list(records)
    except Exception as exc:
        return [failed_record(cfg, f"ensemble of {len(cfgs)}: {reason(exc)}") for cfg in cfgs]
