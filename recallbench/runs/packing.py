"""Packed execution: a card's runs trained at once on one device by long-lived workers.

    with packed(store, say=print) as (done, run_cell):          # what capacity.trained gives
        card_search.measure(base, seeds=(0, 1), run_cell=run_cell, done=done, cut=True)
    run_card(base, seeds=(0, 1), store=path)                     # the same, in one call

**How many at once** (:func:`plan`, printed in one line): the runs' tasks, bounded by the
CPUs (each worker drives its device from one core), by :data:`MAX_PER_DEVICE`, and by
memory: on a GPU its free memory over a CUDA context (``gpu_share.CONTEXT_BYTES``) plus the
run's device parts (:func:`recallbench.harness.resources.estimate`; K members' for a search
batched as an ensemble), and on every device the host's available memory over a worker's
interpreter (:data:`PROCESS_BYTES`, an allowance) plus the run's host parts.

**Tasks.**  On a GPU, while a batch has fewer runs than the plan allows at once, a learning-rate
search with ``train.max_steps_limit`` (every card's protocol, which the batched ensemble
cannot train) becomes one task per candidate, run in different workers at once, then a finish task in the worker that holds the chosen one (its extension,
test and record; :mod:`recallbench.runs.packed_tasks`): the same record as ``lr_search``
trains in one process, up to ``wall_s`` and ``cpu_s`` (``tests/test_packing.py``).  Any
other run is one task (``train.run``: a search without a limit is batched there where the
layer vmaps).  A worker training on a GPU warms each model shape once (one step and one
validation, untimed in the records: Triton compiles and autotunes on first use); every
worker is kept, with what it compiled, for every later batch of the card.

A worker that dies fails the runs it was training or holding (failed records, the other
runs go on) and is replaced.  ``run_cell(configs, limit)``: tasks run under the
:class:`~recallbench.runs.budget.Limit`; once it is spent the workers are stopped and
:class:`~recallbench.runs.budget.BudgetSpent` raised, the batch's runs not stored.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections import deque
from typing import Any, Callable, Iterator, Sequence

from recallbench.api.errors import reason
from recallbench.runs.budget import BudgetSpent

#: host memory allowed per worker for its interpreter, torch and Lightning (an allowance)
PROCESS_BYTES = 640 << 20
#: the most runs packed on one device
MAX_PER_DEVICE = 64


@dataclasses.dataclass
class Plan:
    """How many runs train at once on ``device`` and what bounds it."""

    device: str
    runs: int
    wanted: int  # tasks the batch has
    per_run: int  # bytes of one run where memory binds (the device's on a GPU)
    free: int  # bytes free there
    host_fit: int  # runs the host's memory holds
    cpus: int
    bound: str  # what set ``runs``

    def line(self) -> str:
        from recallbench.harness.resources import human

        where = "GPU" if self.device.startswith("cuda") else "host"
        return (f"packing: {self.runs} run(s) at once on {self.device} (bound by {self.bound}): "
                f"{self.wanted} task(s) in the batch; {human(self.free)} {where} memory free, "
                f"~{human(self.per_run)} a run, {self.free // max(self.per_run, 1)} fit; "
                f"host memory fits {self.host_fit}; {self.cpus} CPUs")


def split(cfg) -> bool:
    """Whether a run may train as one task per learning-rate candidate: a search with a limit
    (without ``train.lr_rung``, whose halving trains its candidates in one process)."""
    return (isinstance(cfg.train.lr, list) and cfg.train.max_steps_limit is not None
            and getattr(cfg.train, "lr_rung", None) is None)


def run_bytes(cfg) -> tuple[int, int]:
    """(device bytes, host bytes) of one task of ``cfg``: a candidate, or the whole run (a
    search without a limit as K batched members)."""
    from recallbench.harness.ensemble.memory import ensemble_bytes
    from recallbench.harness.lr_candidates import candidates

    cands = candidates(cfg)
    members = 1 if split(cfg) else len(cands)
    one = cands[0]
    return (ensemble_bytes(one, members, on_device=True),
            ensemble_bytes(one, members, on_device=False))


def device_of(cfgs: Sequence) -> str:
    """The device the runs train on: ``cuda``/``cuda:N`` or ``cpu``."""
    from recallbench.runs.gpu_share import uses_gpu

    return uses_gpu(c.train.device for c in cfgs) or "cpu"


def plan(cfgs: Sequence, *, cpus: int | None = None, free: int | None = None,
         host_free: int | None = None, probe: Callable[[str], int] | None = None) -> Plan:
    """The runs of ``cfgs`` (resolved) at once on their device (module doc).  ``free``,
    ``host_free``, ``cpus`` override what is read here (the GPU's free memory is read by a
    short-lived process: the driver makes no CUDA context)."""
    from recallbench.harness.resources import host_available
    from recallbench.runs.gpu_share import CONTEXT_BYTES, probe_free

    device = device_of(cfgs)
    cpus = cpus or os.cpu_count() or 1
    wanted = sum(len(c.train.lr) if split(c) else 1 for c in cfgs)
    dev_b, host_b = (max(v) for v in zip(*(run_bytes(c) for c in cfgs)))
    host_free = host_available() if host_free is None else host_free
    gpu = device.startswith("cuda")
    host_each = PROCESS_BYTES + host_b + (0 if gpu else dev_b)
    host_fit = host_free // host_each
    if gpu:
        free = (probe or probe_free)(device) if free is None else free
        per_run = CONTEXT_BYTES + dev_b
    else:
        free, per_run = host_free, host_each
    limits = {"the batch's tasks": wanted, "the CPUs": cpus,
              "memory": min(free // per_run, host_fit), "the most per device": MAX_PER_DEVICE}
    bound = min(limits, key=lambda k: limits[k])
    return Plan(device, max(1, int(limits[bound])), wanted, per_run, free, int(host_fit), cpus,
                bound)


@dataclasses.dataclass
class _Run:
    cfg: Any
    raw: dict
    start: float | None = None
    entries: list = dataclasses.field(default_factory=list)
    left: int = 0  # candidate tasks not back yet
    holders: dict = dataclasses.field(default_factory=dict)  # candidate -> worker
    train_s: float = 0.0
    cpu_s: float = 0.0
    done: bool = False
    split: bool = False  # trained as one task per candidate


class Packed:
    """Long-lived workers that train runs' tasks at once (module doc).  ``workers``: a fixed
    count instead of :func:`plan`'s; ``say``: told the plan's line when it changes."""

    def __init__(self, workers: int | None = None, threads: int = 1,
                 say: Callable[[str], None] | None = print, plan_kw: dict | None = None,
                 spread: bool = False):
        self.workers, self.threads, self.say = workers, threads, say
        self.plan_kw = plan_kw or {}
        self.pool = None
        self.plan: Plan | None = None
        self.tasks: dict[str, int] = {}  # tasks submitted, by kind
        self.spread = spread  # split searches on any device (tests)
        self._said = None

    def _submit(self, w, task, func, args) -> None:
        self.tasks[task[1]] = self.tasks.get(task[1], 0) + 1
        self.pool.submit(w, task, func, args, None)

    def _admit(self, cfgs) -> int:
        p = plan(cfgs, **self.plan_kw)
        if self.workers is not None:
            p = dataclasses.replace(p, runs=self.workers, bound="--workers")
        self.plan = p
        if self.say is not None and (p.runs, p.bound, p.wanted) != self._said:
            self._said = (p.runs, p.bound, p.wanted)
            self.say(p.line())
        if self.pool is None:
            import multiprocessing

            from recallbench.runs.pool import WorkerPool
            from recallbench.runs.watchdog import WORKER_START_S

            self.pool = WorkerPool(p.runs, self.threads, WORKER_START_S,
                                   ("recallbench.runs.packed_tasks", "recallbench.harness.train"),
                                   multiprocessing.get_context("spawn"))
        return min(p.runs, len(self.pool.workers))

    def run(self, raws: list[dict], limit=None) -> Iterator[tuple[int, dict]]:
        """Every run of ``raws`` (canonical configs); ``(index, record)`` as each finishes."""
        from recallbench.api.config import resolve
        from recallbench.api.record import failed_record
        from recallbench.harness.lr_candidates import choose
        from recallbench.runs import packed_tasks as T

        if not raws:
            return
        runs = [_Run(resolve(r), r) for r in raws]
        allowed = self._admit([r.cfg for r in runs])
        pool = self.pool
        todo: deque = deque()
        # whole runs would leave workers idle: split them, on a GPU (on a CPU the candidates
        # take the cores whole runs would use; bench_packing.py measured no gain there)
        spread = len(runs) < allowed and (self.plan.device.startswith("cuda") or self.spread)
        for i, r in enumerate(runs):
            r.split = spread and split(r.cfg)
            if r.split:
                r.left = len(r.cfg.train.lr)
                r.entries = [None] * r.left
                todo += [(i, "candidate", j) for j in range(r.left)]
            else:
                todo.append((i, "whole", None))
        finish: dict[int, deque] = {}  # id(worker) -> runs to finish there
        drops: dict[int, list] = {}  # id(worker) -> keys to drop there
        left = len(runs)
        ok = False

        def key(i, j):
            return f"{id(self)}:{i}:{j}:{runs[i].cfg.hash()}"

        def end(i, record) -> tuple[int, dict]:
            r = runs[i]
            r.done = True
            for j, w in r.holders.items():
                drops.setdefault(id(w), []).append(key(i, j))
            if record.get("status") == "ok" and r.split:  # its tasks' time
                record["wall_s"] = round(time.perf_counter() - r.start, 3)
                record["cpu_s"] = round(r.cpu_s + float(record.get("cpu_s") or 0.0), 3)
            return i, record

        def failed(i, why) -> tuple[int, dict]:
            return end(i, failed_record(runs[i].cfg, why))

        try:
            while left:
                for w in pool.idle():
                    if len(pool.busy()) >= allowed:
                        break
                    if finish.get(id(w)):
                        i = finish[id(w)].popleft()
                        r = runs[i]
                        b = choose(r.entries)
                        self._submit(w, (i, "finish", b), T.finish,
                                     (r.raw, key(i, b), r.entries, b, r.train_s, self.threads,
                                      limit))
                    elif drops.get(id(w)):
                        self._submit(w, (None, "drop", None), T.drop, (drops.pop(id(w)),))
                    else:
                        while todo and runs[todo[0][0]].done:  # a run failed already
                            todo.popleft()
                        if not todo:
                            continue
                        i, kind, j = task = todo.popleft()
                        if runs[i].start is None:
                            runs[i].start = time.perf_counter()
                        args = ((runs[i].raw, j, key(i, j), self.threads, limit)
                                if kind == "candidate" else (runs[i].raw, self.threads, limit))
                        self._submit(w, task, T.candidate if kind == "candidate" else T.whole,
                                     args)
                out = []
                for kind, w, value in pool.wait():
                    i, what, j = w.key or (None, None, None)
                    if kind == "died":
                        busy = w.busy
                        pool.replace(w)
                        hit = {i} if busy and i is not None else set()
                        hit |= {k for k, r in enumerate(runs) if not r.done
                                and any(h is w for h in r.holders.values())}
                        hit |= set(finish.pop(id(w), ()))
                        drops.pop(id(w), None)
                        for k in sorted(hit):
                            if not runs[k].done:
                                out.append(failed(k, f"the worker process died (exit code "
                                                     f"{value}) while training or holding it"))
                        continue
                    if isinstance(value, BudgetSpent):
                        raise value
                    if what == "drop" or runs[i].done:
                        if what == "candidate" and not isinstance(value, BaseException):
                            drops.setdefault(id(w), []).append(key(i, j))
                        continue
                    r = runs[i]
                    if isinstance(value, BaseException):
                        out.append(failed(i, reason(value)))
                    elif what == "whole":
                        out.append(end(i, value))
                    elif what == "finish":
                        out.append(end(i, value))
                    else:
                        r.entries[j], r.left = value["entry"], r.left - 1
                        r.train_s += value["train_s"]
                        r.cpu_s += value["cpu_s"]
                        if value["entry"]["val_accuracy"] is not None:
                            r.holders[j] = w
                        if r.left == 0:
                            b = choose(r.entries)
                            if b is None:  # as lr_search's DivergedError reads
                                out.append(failed(i, (
                                    f"DivergedError: every learning rate of {len(r.entries)} "
                                    f"diverged (first: {r.entries[0]['error']})")[:500]))
                            else:  # the others are dropped: the holder of b finishes it
                                h = r.holders.pop(b)
                                finish.setdefault(id(h), deque()).append(i)
                                for jj, hh in r.holders.items():
                                    drops.setdefault(id(hh), []).append(key(i, jj))
                                r.holders = {}
                for got in out:
                    left -= 1
                    yield got
            ok = True
        finally:
            if not ok:  # stopped early (a budget, an error, Ctrl-C): the workers' state goes
                self.stop()

    def stop(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.stop(1.0)

    def close(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.close()


@contextlib.contextmanager
def packed(store, workers: int | None = None, say: Callable[[str], None] | None = print,
           plan_kw: dict | None = None):
    """``(done, run_cell)`` as :func:`recallbench.runs.capacity.trained` gives them, the runs
    packed (module doc): ``done`` the ok records of ``store`` by config hash, ``run_cell(
    configs, limit=None)`` trains them, appending each record to ``store`` as it finishes."""
    from recallbench.runs.store import Store

    store = Store(store)
    done = {h: r for h, r in store.read().by_hash.items()
            if r.get("status") == "ok"} if store.path.is_dir() else {}
    ex = Packed(workers, say=say, plan_kw=plan_kw)
    try:
        with store.open() as sink:
            def run_cell(cfgs: list[dict], limit=None) -> list[dict]:
                got = []
                for _, rec in ex.run(list(cfgs), limit):
                    sink.append(rec)
                    got.append(rec)
                return got

            yield done, run_cell
    finally:
        ex.close()


def run_card(base, *, seeds: Sequence[int], store, workers: int | None = None,
             say: Callable[[str], None] = print, plan_kw: dict | None = None, **kwargs):
    """A method-2 card (:func:`recallbench.runs.card_search.measure`) with its runs packed."""
    from recallbench.runs.card_search import measure

    with packed(store, workers, say=say, plan_kw=plan_kw) as (done, run_cell):
        return measure(base, seeds=seeds, run_cell=run_cell, done=done, say=say, cut=True,
                       **kwargs)
