"""A small pool of worker processes that says which worker runs which task, and since when.

``concurrent.futures.ProcessPoolExecutor`` hides both, and killing one of its workers
breaks the whole pool (every task in flight is lost with it).  Here each worker is a
``multiprocessing`` process (spawn) with a pipe of its own and runs one task at a time, so
the driver knows what each is doing and for how long, and can kill just one worker, start
a replacement in its slot and resubmit just its task
(:class:`recallbench.runs.executors.Processes` does, under its per-point watchdog).

A worker starts with :func:`recallbench.runs.worker.init_worker` (its torch threads; it
dies with its driver; SIGINT is the driver's; SIGTERM ends it at once), then says it is
ready; a task's clock starts when the worker is ready and has it.  Events come from
:meth:`WorkerPool.wait`: ``("done", worker, result)``, where ``result`` is the task's value
or the exception it raised, or ``("died", worker, exit code)``.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

from recallbench.api.errors import reason
from recallbench.runs.budget import BudgetSpent

READY = "ready"


def _serve(conn, threads: int | None, parent_pid: int, preload: tuple[str, ...]) -> None:
    """A worker's life: set up, import the ``preload`` modules (what its tasks run: their
    import is start-up, not a task's time), say ready, then run one task per message until
    told to stop (``None``) or the driver's end of the pipe closes."""
    import importlib

    from recallbench.runs.worker import init_worker

    init_worker(threads, parent_pid)
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # the task that needs it fails with the reason, as it would
            pass
    conn.send(READY)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if task is None:
            return
        func, args = task
        try:
            out: tuple[str, Any] = ("ok", func(*args))
        except (Exception, BudgetSpent) as exc:  # a run stopped by its deadline: sent back
            out = ("error", exc)
        try:
            conn.send(out)
        except Exception as exc:  # a value or exception that cannot be pickled back
            conn.send(("error", RuntimeError(f"the result could not be sent back to the "
                                             f"driver ({reason(exc)})")))


class Worker:
    """One worker process: its pipe, whether it is ready, and its task (``key``, ``since``:
    when it started on it, or None before the worker was ready; ``timeout`` seconds)."""

    def __init__(self, proc, conn):
        self.proc, self.conn = proc, conn
        self.spawned = time.monotonic()
        self.ready = False
        self.key: Any = None
        self.busy = False
        self.since: float | None = None
        self.timeout: float | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def deadline(self, start_timeout: float) -> float | None:
        """When this worker is overdue: its task's time is up, or it is not ready in time."""
        if not self.ready:
            return self.spawned + start_timeout
        if self.busy and self.timeout is not None and self.since is not None:
            return self.since + self.timeout
        return None


class WorkerPool:
    """``size`` spawn-context worker processes with ``threads`` torch threads each.
    ``start_timeout``: seconds a new worker may take to be ready (interpreter, imports of
    the ``preload`` modules)."""

    def __init__(self, size: int, threads: int | None, start_timeout: float = 300.0,
                 preload: tuple[str, ...] = (), context=None):
        import multiprocessing

        self._context = context or multiprocessing.get_context("spawn")
        self.threads, self.start_timeout, self.preload = threads, start_timeout, preload
        self.workers: list[Worker] = []
        for _ in range(size):
            self.workers.append(self._spawn())

    def _spawn(self) -> Worker:
        parent, child = self._context.Pipe()
        proc = self._context.Process(target=_serve, args=(child, self.threads, os.getpid(),
                                                            self.preload),
                                     name="recallbench-worker")
        proc.start()
        child.close()
        return Worker(proc, parent)

    def idle(self) -> list[Worker]:
        return [w for w in self.workers if not w.busy]

    def busy(self) -> list[Worker]:
        return [w for w in self.workers if w.busy]

    def submit(self, worker: Worker, key: Any, func: Callable, args: tuple,
               timeout: float | None) -> None:
        """Run ``func(*args)`` on ``worker`` (an idle one); ``timeout`` seconds from when it
        starts on it (None: no bound)."""
        worker.key, worker.busy, worker.timeout = key, True, timeout
        worker.since = time.monotonic() if worker.ready else None
        worker.conn.send((func, args))

    def overdue(self) -> list[Worker]:
        """The workers past their deadline now."""
        now = time.monotonic()
        return [w for w in self.workers
                if (d := w.deadline(self.start_timeout)) is not None and d <= now]

    def wait(self, poll_s: float = 1.0) -> list[tuple[str, Worker, Any]]:
        """Wait (at most until the next deadline, and ``poll_s``) for results and deaths."""
        from multiprocessing.connection import wait

        now = time.monotonic()
        deadlines = [d for w in self.workers
                     if (d := w.deadline(self.start_timeout)) is not None]
        timeout = max(0.0, min([poll_s] + [d - now for d in deadlines]))
        watched = {}
        for w in self.workers:
            watched[w.conn] = w
            watched[w.proc.sentinel] = w
        events = []
        seen = set()
        for handle in wait(list(watched), timeout):
            w = watched[handle]
            if id(w) in seen:
                continue
            seen.add(id(w))
            events += self._read(w)
        return events

    def _read(self, w: Worker) -> list[tuple[str, Worker, Any]]:
        """What ``w`` has to say: messages waiting in its pipe, or its death."""
        out = []
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg == READY:
                    w.ready = True
                    if w.busy:
                        w.since = time.monotonic()
                    continue
                status, value = msg
                w.busy, w.since = False, None
                out.append(("done", w, value))
        except (EOFError, OSError):
            pass
        if not out and not w.proc.is_alive():
            w.proc.join(0.1)
            out.append(("died", w, w.proc.exitcode))
        return out

    def replace(self, w: Worker) -> Worker:
        """Kill ``w`` (a stopped process too) and start a new worker in its slot."""
        _kill(w)
        new = self._spawn()
        self.workers[self.workers.index(w)] = new
        return new

    def alive(self) -> list:
        return [w.proc for w in self.workers if w.proc.is_alive()]

    def stop(self, grace_s: float = 1.0) -> None:
        """SIGTERM to every worker, then SIGKILL to any alive after ``grace_s`` seconds."""
        procs = self.alive()
        for p in procs:
            p.terminate()
        deadline = time.monotonic() + grace_s
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for w in self.workers:
            _kill(w)
        self.workers = []

    def close(self, grace_s: float = 5.0) -> None:
        """Tell idle workers to finish, wait ``grace_s`` seconds, then kill what is left."""
        for w in self.workers:
            if not w.busy:
                try:
                    w.conn.send(None)
                except OSError:
                    pass
        deadline = time.monotonic() + grace_s
        for w in self.workers:
            w.proc.join(max(0.0, deadline - time.monotonic()))
        for w in self.workers:
            _kill(w)
        self.workers = []


def _kill(w: Worker) -> None:
    if w.proc.is_alive():
        w.proc.kill()  # SIGKILL: a stopped (SIGSTOP) process dies too
    w.proc.join(5.0)
    w.conn.close()
