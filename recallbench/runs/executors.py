"""Where a sweep's points run.

Three executors share one interface, ``run(items) -> iterator of (index, result)``, yielding
each work item as it completes (``result`` is the list of its records, or the exception
that killed its worker).  A work item is a list of configs: one point, or with
``--ensemble K`` up to K points of the same ``shape_key`` trained as one batched model;
each worker runs it with :func:`recallbench.runs.worker.run_configs`.

* ``inprocess`` (default): one point after another in this process.
* ``processes``: ``--workers K`` local worker processes (``ProcessPoolExecutor``, spawn
  context), each with ``--threads-per-worker`` torch threads (default 1).  K is bounded by
  the CPUs, or, when the runs train on a GPU, by ``--workers-per-gpu`` and the GPU's free
  memory: the workers share the one device (:mod:`recallbench.runs.gpu_share`).
* ``ray``: tasks on an existing cluster (``--address``) or on a local one started with
  ``ray.init(num_cpus=workers · threads)``; each task asks for ``threads`` CPUs.

An executor's workers (the process pool, the local Ray instance) start on the first
``run`` and are kept for the next one (an adaptive search calls it once a round) until
``close()``.  Only the driver (:func:`recallbench.runs.driver.drive`) writes the store, one
record as each item finishes.
"""
from __future__ import annotations

import concurrent.futures as cf
import os
from typing import Any, Callable, Iterator

from recallbench.api.errors import ConfigError
from recallbench.runs.gpu_share import GpuRuns
from recallbench.runs.worker import init_worker, run_configs

EXECUTORS = ("inprocess", "processes", "ray")


# -- executors ---------------------------------------------------------------------------

class InProcess:
    """One item after another in this process.  ``runner`` and ``reraise``: see
    :func:`recallbench.runs.worker.run_configs` (a leaderboard run passes its own);
    ``compile``: the ensembles' compile mode (:mod:`recallbench.harness.ensemble_compile`)."""

    name = "inprocess"

    def __init__(self, threads: int | None = None, ensemble: bool = False,
                 runner: Callable | None = None, reraise: tuple[type[Exception], ...] = (),
                 compile: str | None = None):
        self.threads, self.ensemble, self.compile = threads, ensemble, compile
        self.runner, self.reraise = runner, reraise
        self.parallel = 1

    def run(self, items: list[list[dict]], gate=None) -> Iterator[tuple[int, Any]]:
        for i, item in enumerate(items):
            if gate is not None and not gate.admit(i):
                return
            result = run_configs(item, self.threads, self.ensemble, self.runner, self.reraise,
                                 self.compile)
            if gate is not None:
                gate.finished(i)
            yield i, result

    def close(self) -> None:
        pass


class Processes:
    name = "processes"

    def __init__(self, workers: int, threads: int = 1, ensemble: bool = False,
                 notify: Callable[[str], None] | None = None, compile: str | None = None):
        import multiprocessing

        self.workers, self.threads, self.ensemble = workers, threads, ensemble
        self.compile = compile
        self.notify = notify  # told at once when the workers are stopped early
        self.parallel = workers
        self._context = multiprocessing.get_context("spawn")
        self._pool: cf.ProcessPoolExecutor | None = None

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=self._context,
                                      initializer=init_worker,
                                      initargs=(self.threads, os.getpid()))

    def run(self, items: list[list[dict]], gate=None) -> Iterator[tuple[int, Any]]:
        """``gate`` (a time budget): each item is submitted only when a worker is free and
        the gate admits it, so its clock starts when it does."""
        from concurrent.futures.process import BrokenProcessPool

        if not items:
            return
        todo = list(range(len(items)))[::-1]
        # enough queued that no worker waits for the driver; with a gate, none queued
        window = 2 * self.workers if gate is None else self.workers
        pending: dict[cf.Future, int] = {}
        crashes: dict[int, int] = {}  # item → pool crashes it was in flight for
        if self._pool is None:  # kept between calls: an adaptive search calls once a round
            self._pool = self._new_pool()
        try:
            while todo or pending:
                while todo and len(pending) < window:
                    i = todo.pop()
                    if gate is not None and not gate.admit(i):
                        todo.clear()
                        break
                    pending[self._pool.submit(run_configs, items[i], self.threads,
                                              self.ensemble, None, (), self.compile)] = i
                done, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                broken = None
                for fut in done:
                    i = pending.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool as exc:
                        broken = exc
                        pending[fut] = i  # handled with the rest of the pool below
                        continue
                    except Exception as exc:  # e.g. a record that cannot be pickled back
                        result = exc
                    if gate is not None:
                        gate.finished(i)
                    yield i, result
                if broken is not None:
                    # A worker died (killed, out of memory, a crash in native code): every
                    # item in flight is lost with the pool and we cannot tell which one
                    # killed it.  Each gets one more try in a fresh pool, then is failed.
                    lost = sorted(pending.values())
                    pending.clear()
                    self._pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = self._new_pool()
                    for i in lost:
                        if gate is not None:
                            gate.forget(i)
                        crashes[i] = crashes.get(i, 0) + 1
                        if crashes[i] > 1:
                            yield i, RuntimeError(f"worker process died twice while running "
                                                  f"this point ({broken})")
                        else:
                            todo.append(i)
        finally:
            if pending:  # left early (an error, Ctrl-C, SIGTERM): stop the work in flight
                self.stop()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop the workers now, points in flight and all: SIGTERM, then SIGKILL for any
        still alive after ``grace_s`` seconds (a worker exits at once on SIGTERM, see
        :func:`recallbench.runs.worker.init_worker`)."""
        import time

        pool, self._pool = self._pool, None
        if pool is None:
            return
        procs = [p for p in list((pool._processes or {}).values()) if p.is_alive()]
        if procs and self.notify is not None:
            self.notify(f"stopping {len(procs)} worker{'s' if len(procs) > 1 else ''}...")
        for p in procs:
            p.terminate()
        deadline = time.monotonic() + grace_s
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1.0)
        pool.shutdown(wait=False, cancel_futures=True)


def make_executor(kind: str = "inprocess", *, workers: int | None = None, address: str | None = None,
                  threads: int | None = None, ensemble: bool = False, gpus: float | None = None,
                  notify: Callable[[str], None] | None = None, compile: str | None = None,
                  gpu: GpuRuns | None = None):
    """The executor ``kind``; ``gpu``: the runs train on that GPU (processes: the workers
    share it, see :mod:`recallbench.runs.gpu_share`); ``compile``: the ensembles' mode."""
    if kind not in EXECUTORS:
        raise ConfigError(f"--executor {kind!r} is not allowed: one of {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers} is not allowed: must be >= 1")
    if threads is not None and threads < 1:
        raise ConfigError(f"--threads-per-worker {threads} is not allowed: must be >= 1")
    if kind == "inprocess":
        return InProcess(threads, ensemble, compile=compile)
    if kind == "processes":
        cpus = os.cpu_count() or 1
        if threads is not None and threads > cpus:
            raise ConfigError(f"--threads-per-worker {threads} is not allowed: must be in "
                              f"[1, {cpus}] (the CPUs of this machine)")
        if gpu is not None:  # the workers share one GPU: bounded by it, not by the CPUs
            return Processes(gpu.workers(workers, cpus), threads or 1, ensemble, notify, compile)
        # each worker is a training process (hundreds of MB): more than the CPUs only waits
        if workers is not None and workers > cpus:
            raise ConfigError(f"--workers {workers} is not allowed: must be in [1, {cpus}] "
                              "(the CPUs of this machine; a worker trains one point at a time)")
        return Processes(workers or cpus, threads or 1, ensemble, notify, compile)
    from recallbench.runs.ray_executor import Ray

    return Ray(address, workers, threads or 1, ensemble, gpus)
