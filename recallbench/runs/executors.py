"""Where a sweep's points run.

Three executors share one interface, ``run(items) -> iterator of (index, result)``, yielding
each work item as it completes (``result`` is the list of its records, or the exception
that killed its worker).  A work item is a list of configs: one point, or with
``--ensemble K`` up to K points of the same ``shape_key`` trained as one batched model;
each worker runs it with :func:`recallbench.runs.worker.run_configs`.

* ``inprocess`` (default): one point after another in this process.
* ``processes``: ``--workers K`` local worker processes (:mod:`recallbench.runs.pool`,
  spawn context), each with ``--threads-per-worker`` torch threads (default 1), under a
  per-point watchdog (``--point-timeout``, :mod:`recallbench.runs.watchdog`): a worker
  that does not report in time is killed and replaced, its point retried once.  K is bounded by
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

import os
from collections import deque
from typing import Any, Callable, Iterator

from recallbench.api.errors import ConfigError
from recallbench.runs.gpu_share import GpuRuns
from recallbench.runs.worker import run_configs

EXECUTORS = ("inprocess", "processes", "ray")


# -- executors ---------------------------------------------------------------------------

class InProcess:
    """One item after another in this process.  ``runner`` and ``reraise``: see
    :func:`recallbench.runs.worker.run_configs` (a leaderboard run passes its own);
    ``compile``: the ensembles' compile mode (:mod:`recallbench.harness.ensemble.compile`)."""

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
    """``workers`` local processes (:class:`recallbench.runs.pool.WorkerPool`), one item each
    at a time, under a per-item watchdog (:mod:`recallbench.runs.watchdog`): a worker that
    has not reported within ``point_timeout`` seconds (default: from the item's step cap)
    is killed and replaced, and its item retried once, then failed.  ``runner``: see
    :func:`recallbench.runs.worker.run_configs` (a module-level function: it is pickled)."""

    name = "processes"

    def __init__(self, workers: int, threads: int = 1, ensemble: bool = False,
                 notify: Callable[[str], None] | None = None, compile: str | None = None,
                 point_timeout: float | None = None, runner: Callable | None = None):
        import multiprocessing

        self.workers, self.threads, self.ensemble = workers, threads, ensemble
        self.compile, self.point_timeout, self.runner = compile, point_timeout, runner
        self.notify = notify  # told at once when the workers are stopped early
        self.parallel = workers
        self._context = multiprocessing.get_context("spawn")  # CUDA only inside the workers
        self._pool = None  # a WorkerPool, started on the first run, kept until close()

    def run(self, items: list[list[dict]], gate=None) -> Iterator[tuple[int, Any]]:
        """``gate`` (a time budget): each item is submitted only when a worker is free and
        the gate admits it, so its clock starts when it does."""
        from recallbench.runs.pool import WorkerPool
        from recallbench.runs.watchdog import WORKER_START_S, item_timeout, timed_out

        if not items:
            return
        todo = deque(range(len(items)))
        losses: dict[int, int] = {}  # item -> tries lost with their worker
        if self._pool is None:  # kept between calls: an adaptive search calls once a round
            self._pool = WorkerPool(self.workers, self.threads, WORKER_START_S, self._preload(),
                                    self._context)
        pool = self._pool
        finished = False
        try:
            while todo or pool.busy():
                for w in pool.idle():
                    if not todo:
                        break
                    i = todo[0]
                    if gate is not None and not gate.admit(i):
                        todo.clear()
                        break
                    todo.popleft()
                    pool.submit(w, i, run_configs, (items[i], self.threads, self.ensemble,
                                                    self.runner, (), self.compile),
                                item_timeout(items[i], self.point_timeout))
                lost = [(w, None) for w in pool.overdue()]
                if not lost:
                    for kind, w, value in pool.wait():
                        if kind == "died":
                            lost.append((w, value))
                            continue
                        if gate is not None:
                            gate.finished(w.key)
                        yield w.key, value
                for w, code in lost:
                    i, busy = w.key, w.busy
                    limit = w.timeout if w.ready else pool.start_timeout
                    pool.replace(w)
                    if not busy:
                        continue  # an idle worker died: its slot has a new one
                    if gate is not None:
                        gate.forget(i)
                    losses[i] = losses.get(i, 0) + 1
                    if losses[i] < 2:
                        todo.appendleft(i)  # once more, on a fresh worker
                        if self.notify is not None:
                            what = ("died" if code is not None else
                                    f"had not reported within {limit:g} s")
                            self.notify(f"a worker {what}: killed and replaced; the point "
                                        f"runs once more")
                    elif code is None:
                        yield i, timed_out(limit)
                    else:
                        yield i, RuntimeError(f"worker process died twice while running "
                                              f"this point (exit code {code})")
            finished = True
        finally:
            # left early (an error, Ctrl-C, SIGTERM, the caller closing it): stop the work in
            # flight, and drop the pool even when its workers happen to be idle already (a
            # run that finished left none busy: the loop ends only then)
            if not finished and self._pool is not None:
                self.stop()

    def _preload(self) -> tuple[str, ...]:
        """The modules a worker imports before it is ready: what its points run."""
        if self.runner is not None:  # a wrapper (budget.LimitedRun) names what it runs
            return getattr(self.runner, "preload", None) or (self.runner.__module__,)
        return ("recallbench.harness.ensemble" if self.ensemble else "recallbench.harness.train",)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop the workers now, points in flight and all: SIGTERM, then SIGKILL for any
        still alive after ``grace_s`` seconds (a worker exits at once on SIGTERM, see
        :func:`recallbench.runs.worker.init_worker`)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        n = len(pool.alive())
        if n and self.notify is not None:
            self.notify(f"stopping {n} worker{'s' if n > 1 else ''}...")
        pool.stop(grace_s)


def make_executor(kind: str = "inprocess", *, workers: int | None = None, address: str | None = None,
                  threads: int | None = None, ensemble: bool = False, gpus: float | None = None,
                  notify: Callable[[str], None] | None = None, compile: str | None = None,
                  gpu: GpuRuns | None = None, point_timeout: float | None = None):
    """The executor ``kind``; ``gpu``: the runs train on that GPU (processes: the workers
    share it, see :mod:`recallbench.runs.gpu_share`); ``compile``: the ensembles' mode;
    ``point_timeout``: the processes' per-point watchdog (:mod:`recallbench.runs.watchdog`)."""
    from recallbench.runs.watchdog import check_point_timeout

    check_point_timeout(point_timeout, kind)
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
            return Processes(gpu.workers(workers, cpus), threads or 1, ensemble, notify, compile,
                             point_timeout)
        # each worker is a training process (hundreds of MB): more than the CPUs only waits
        if workers is not None and workers > cpus:
            raise ConfigError(f"--workers {workers} is not allowed: must be in [1, {cpus}] "
                              "(the CPUs of this machine; a worker trains one point at a time)")
        return Processes(workers or cpus, threads or 1, ensemble, notify, compile, point_timeout)
    from recallbench.runs.ray_executor import Ray

    return Ray(address, workers, threads or 1, ensemble, gpus)
