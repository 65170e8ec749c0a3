"""The ``ray`` executor: a sweep's work items as Ray tasks, on a cluster or a local instance.

Which cluster, and its credentials: :mod:`recallbench.runs.ray_connect`.  Each task asks for
``--threads-per-worker`` CPUs and ``--gpus-per-worker`` GPUs (fractions share one GPU:
0.25 runs four points on it at once); before any work the cluster is checked to hold a node
with that much, else one line says what it has.  Tasks are spread over the nodes.

A task returns its records to the driver, which alone writes the store; each record names
the node that ran it (:func:`recallbench.api.record.node`).  A task whose worker or node
dies (a node stopped or lost mid-sweep) is retried by Ray up to :data:`RETRIES` times on the
nodes left; after that, or when no live node can run it any more, its points are recorded as
failed with the reason (``node`` null, :func:`lost`), and the next invocation reruns them.
A task that asks for a GPU on a worker where torch sees none fails its points with one line.
``runner`` (set by :func:`recallbench.runs.budget.limited` or a caller; picklable): what
runs each point on the worker (:func:`recallbench.runs.worker.run_configs`); a point it
stops for its budget comes back as the :class:`recallbench.runs.budget.BudgetSpent`.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Iterator

from recallbench.api.errors import ConfigError, UnavailableError
from recallbench.runs import ray_connect
from recallbench.api.errors import reason
from recallbench.runs.worker import THREAD_ENV, run_configs, set_threads

#: Ray's retries of a task whose worker process or node died (never of a point that failed)
RETRIES = 2
#: seconds between checks that some live node can still run the tasks left
WAIT_S = 5.0


class Ray:
    name = "ray"
    runner = None  # what runs each point on the worker (module doc)

    def __init__(self, address: str | None = None, workers: int | None = None, threads: int = 1,
                 ensemble: bool = False, gpus: float | None = None):
        if gpus is not None and not (0 < gpus <= 1 or (gpus > 1 and gpus.is_integer())):
            raise ConfigError(f"--gpus-per-worker {gpus:g} is not allowed: must be a fraction "
                              f"in (0, 1] or a whole number of GPUs")
        try:
            import ray
        except ImportError as exc:
            raise UnavailableError(f"--executor ray needs the ray package "
                                   f"(pip install 'recallbench[ray]'): {exc}") from None
        self.ray, self.threads, self.ensemble, self.gpus = ray, threads, ensemble, gpus or 0
        self._started, self._restore_printer = False, None
        if not ray.is_initialized():
            target = ray_connect.target(address)
            env = {"env_vars": {var: str(threads) for var in THREAD_ENV}}
            ray_connect.connect(ray, target, (workers or os.cpu_count() or 1) * threads,
                                runtime_env=env, log_to_driver=False,
                                logging_level=logging.WARNING)
            self._started = True
            self._restore_printer = _one_line_cluster_messages()
            if not target.local:
                self.name = f"ray@{target.hostport or target.init}"
        try:
            self.parallel = self._slots(self._nodes(), check=True)
        except Exception:
            self.close()
            raise
        self._remote = ray.remote(num_cpus=threads, num_gpus=self.gpus, max_retries=RETRIES,
                                  scheduling_strategy="SPREAD")(_ray_task)

    def _nodes(self) -> list[dict[str, float]]:
        """The resources of each live node."""
        return [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]

    def _slots(self, nodes: list[dict[str, float]], check: bool = False) -> int:
        """Tasks the nodes can run at once; with ``check``, one line when none fits."""
        def fits(have: float, need: float) -> int:
            return int(have / need + 1e-9)

        slots = [min(fits(r.get("CPU", 0), self.threads),
                     fits(r.get("GPU", 0), self.gpus) if self.gpus else 1 << 30) for r in nodes]
        if check and not any(slots):
            cpus = max((r.get("CPU", 0) for r in nodes), default=0)
            gpus = [r.get("GPU", 0) for r in nodes]
            if self.gpus and max(gpus, default=0) < self.gpus:
                raise UnavailableError(
                    f"--gpus-per-worker {self.gpus:g}: the Ray cluster has {sum(gpus):g} GPUs, "
                    f"at most {max(gpus, default=0):g} on one node; ask for at most that, or "
                    f"leave out the flag to run on CPUs")
            raise UnavailableError(f"--threads-per-worker {self.threads}: no node of the Ray "
                                   f"cluster has that many CPUs (at most {cpus:g} on one node)")
        return sum(slots)

    def run(self, items: list[list[dict]], gate=None) -> Iterator[tuple[int, Any]]:
        """All items go to the cluster's queue at once; with ``gate`` (a time budget), at
        most one per task slot, each only when the gate admits it."""
        ray = self.ray
        todo = list(range(len(items)))[::-1]
        refs: dict[Any, int] = {}

        def submit() -> None:
            while todo and (gate is None or len(refs) < self.parallel):
                i = todo.pop()
                if gate is not None and not gate.admit(i):
                    todo.clear()
                    return
                refs[self._remote.remote(items[i], self.threads, self.ensemble, self.gpus,
                                         self.runner)] = i

        submit()
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1, timeout=WAIT_S)
                if not ready and not self._slots(self._nodes()):
                    why = (f"no live node of the Ray cluster has the {self.threads} CPUs"
                           + (f" and {self.gpus:g} GPUs" if self.gpus else "")
                           + " this point asks for any more (a node was lost)")
                    for ref in list(refs):
                        ray.cancel(ref, force=True)
                        i = refs.pop(ref)
                        yield i, _failed(items[i], why, lost=True)
                    while todo:  # those a gate held back would wait for the same slots
                        i = todo.pop()
                        yield i, _failed(items[i], why, lost=True)
                for ref in ready:
                    i = refs.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as exc:  # its worker or node died RETRIES + 1 times, ...
                        result = _failed(items[i], f"ray task failed: {reason(exc)}", lost=True)
                    if gate is not None:
                        gate.finished(i)
                    yield i, result
                submit()
        finally:  # the cluster stays up for the next call until close()
            for ref in refs:
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()
            self._started = False
        if self._restore_printer is not None:
            self._restore_printer()
            self._restore_printer = None


def _one_line_cluster_messages():
    """Ray prints the cluster's messages to the driver (a task retried because its node died,
    a node marked dead), some over several lines: print the first line of each.  Returns
    what undoes it (None if this Ray prints them some other way)."""
    from ray._private import worker

    original = getattr(worker, "print_to_stdstream", None)
    if original is None:
        return None

    def first_lines(data, ignore_prefix):
        if data.get("pid") == "raylet":
            lines = [str(line).strip().splitlines()[0][:400] for line in data.get("lines", [])
                     if str(line).strip()]
            data = {**data, "lines": lines}
        return original(data, ignore_prefix)

    worker.print_to_stdstream = first_lines
    return lambda: setattr(worker, "print_to_stdstream", original)


def _failed(configs: list[dict], error: str, lost: bool = False) -> list[dict]:
    """Failed records of a work item; ``lost``: no worker returned it, so ``node`` is null."""
    from recallbench.api.config import resolve
    from recallbench.api.record import failed_record

    records = [failed_record(resolve(raw), error) for raw in configs]
    return [{**r, "node": None} for r in records] if lost else records


def lost(record: dict) -> bool:
    """Whether ``record`` is a point no worker returned (its task lost with its node)."""
    return record.get("status") == "failed" and record.get("node", {}) is None


def run_keeping(executor, items: list[list[dict]], say=None) -> Iterator[tuple[int, Any]]:
    """``executor.run(items)``, but an item lost with its node (:func:`lost`, after Ray's own
    retries) is not yielded: it runs once more, on the nodes left (``say`` is told); lost
    again, UnavailableError names how many and why.  Other results pass unchanged."""
    todo, why = list(range(len(items))), ""
    for _ in range(2):
        again = []
        for j, result in executor.run([items[i] for i in todo]):
            gone = [] if isinstance(result, BaseException) else [r for r in result if lost(r)]
            if gone:
                again.append(todo[j])
                why = str(gone[0].get("error"))
                continue
            yield todo[j], result
        todo = sorted(again)
        if not todo:
            return
        if say is not None:
            say(f"{len(todo)} run(s) lost with their node ({why}): they run once more")
    raise UnavailableError(f"{len(todo)} run(s) lost with their node twice ({why}); not "
                           "stored: the same command resumes from the store")


def _ray_task(configs: list[dict], threads: int, ensemble: bool, gpus: float,
              runner=None):
    from recallbench.runs.budget import BudgetSpent

    set_threads(threads)
    if gpus:
        import torch

        if not torch.cuda.is_available():
            import ray

            return _failed(configs, (
                f"--gpus-per-worker {gpus:g}: Ray gave this task GPU {ray.get_gpu_ids()} "
                f"but torch {torch.__version__} sees no CUDA device on this node "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r})"))
    try:
        return run_configs(configs, threads, ensemble, runner)
    except BudgetSpent as exc:  # a BaseException: returned, as a worker process returns it
        return exc

