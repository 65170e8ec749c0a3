"""A time budget for a run of many points, and the number of budget-sized calls a grid needs.

A long grid runs on a machine lent for a few minutes at a time as repeated calls of the
same command, each stopping cleanly before it would overrun and the next resuming from
the store.  A :class:`Gate` starts each work item on the first free worker while the
time left holds the longest an item has taken so far; the first item always starts.
``recallbench sweep`` and ``recallbench leaderboard run`` both run their items this way::

    drive(items, executor, store, show, tally, gate=Gate(budget_s))

:func:`estimate` is the other half: how many such calls a grid's pending points need,
from their steps and a per-step time the caller measured (an estimate, printed as one).

A gate only decides which items start.  A run already training is stopped by its
:func:`deadline` (a :class:`Limit` of wall time or of its process's CPU time; a capacity
search's cells, :func:`limited`): it raises :class:`BudgetSpent` in the run, which is
then not recorded, so a rerun trains it again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import time
from typing import Callable, Hashable, Sequence

#: ``--time-budget`` bounds (seconds): at least one second, at most about four months
MIN_BUDGET_S, MAX_BUDGET_S = 1.0, 1e7
#: a call of ten minutes less the start-up (interpreter, CUDA context, workers)
DEFAULT_CHUNK_S = 540.0
#: exit status of a sweep stopped by its time budget with points left (none failed)
EXIT_BUDGET = 3


def check_budget(seconds: float | None, flag: str = "--time-budget") -> None:
    """One line naming the flag and the range when ``seconds`` is not a usable budget."""
    from recallbench.api.errors import ConfigError

    if seconds is not None and not MIN_BUDGET_S <= seconds <= MAX_BUDGET_S:
        raise ConfigError(f"{flag} {seconds:g}: must be in [1, 1e7] seconds")


class Gate:
    """Which work items start within ``budget`` seconds counted from ``start`` (default:
    now) on ``clock`` (default ``time.monotonic``).  An executor asks :meth:`admit` each
    time a worker is free and tells :meth:`finished` when the item is back; without a
    budget every item starts.

    An item starts when the time left holds the longest an item has taken so far: the
    slowest that finished, or the one running longest, whichever is longer (an item
    still running at 95 s says items can take 95 s).  So the first item always starts, a
    free worker never waits for a slower one's round to end, and once an item is refused
    none starts after it (the time left only shrinks, the estimate only grows).

        >>> now = [0.0]
        >>> gate = Gate(30.0, clock=lambda: now[0])
        >>> gate.admit("a"), gate.admit("b")      # nothing timed yet
        (True, True)
        >>> now[0] = 10.0; gate.finished("a")     # a took 10 s; b has run 10 s
        >>> gate.admit("c")                       # 20 s left hold 10 s
        True
        >>> now[0] = 16.0                         # b has now run 16 s: 14 s left do not
        >>> gate.admit("d")
        False
    """

    def __init__(self, budget: float | None, *, clock: Callable[[], float] | None = None,
                 start: float | None = None):
        self.budget = budget
        self.clock = clock or time.monotonic
        self.start = self.clock() if start is None else start
        self.running: dict[Hashable, float] = {}  # item -> when it started
        self.slowest = 0.0  # the longest an item took to finish
        self.closed = False

    def estimate(self, now: float) -> float:
        """The longest an item has taken so far, finished or still running (seconds)."""
        return max([self.slowest] + [now - t for t in self.running.values()])

    def admit(self, item: Hashable) -> bool:
        """True: start ``item`` now (its clock starts).  False: start nothing more."""
        now = self.clock()
        if self.budget is not None and not self.closed:
            self.closed = self.budget - (now - self.start) < self.estimate(now)
        if self.closed:
            return False
        self.running[item] = now
        return True

    def finished(self, item: Hashable) -> None:
        """``item`` is back: its time counts toward the estimate."""
        began = self.running.pop(item, None)
        if began is not None:
            self.slowest = max(self.slowest, self.clock() - began)

    def forget(self, item: Hashable) -> None:
        """``item`` was lost with its worker: neither running nor timed."""
        self.running.pop(item, None)


def ending(counts: dict, store, budget: float | None) -> tuple[str, int]:
    """A budgeted run's last line and exit status, from its counts (``left``: points still
    to run ok, ``unstarted``: those the budget did not start, ``failed``): ``all done``
    and 0, or how many are left and why and that the same command continues, with 1 when
    some point failed (it takes precedence), :data:`EXIT_BUDGET` when the budget stopped
    the run, 0 otherwise (``--limit`` left the rest)."""
    left, failed = counts.get("left", 0), counts.get("failed", 0)
    stopped = budget is not None and counts.get("unstarted", 0) > 0
    status = 1 if failed else EXIT_BUDGET if stopped else 0
    if not left:
        return f"all done: every point is in {store}", status
    why = ([f"stopped by the time budget of {budget:g} s"] if stopped else []) \
        + ([f"{failed} failed, to be retried"] if failed else [])
    return (f"{left} points left ({', '.join(why) or 'not started'}): the same command "
            f"continues from {store}", status)


@dataclasses.dataclass(frozen=True)
class Estimate:
    """What :func:`estimate` computed: points, their steps, GPU seconds and calls."""

    points: int
    steps: int  # layer-steps: a point's step cap x its layers x its lr candidates
    seconds: float
    chunk_s: float
    chunks: int

    def line(self, step_ms: float, speedup: float) -> str:
        return (f"estimate: {self.points} points left, at most {self.steps:,} layer-steps x "
                f"{step_ms:g} ms / {speedup:g} speed-up = {self.seconds / 60:.1f} min: "
                f"{self.chunks} call(s) of --time-budget {self.chunk_s:g} s (an upper bound "
                f"from the step caps; early stops shorten it)")


def point_steps(cfg) -> int:
    """A run's step cap x its layers x its learning-rate candidates: what it costs, in
    steps of one layer, when it does not stop early (a resolved RunConfig)."""
    lr = cfg.train.lr
    return cfg.train.max_steps * cfg.model.n_layers * (len(lr) if isinstance(lr, list) else 1)


def estimate(cfgs: Sequence, step_ms: float, speedup: float = 1.0,
             chunk_s: float = DEFAULT_CHUNK_S) -> Estimate:
    """Calls of ``chunk_s`` seconds that runs of ``cfgs`` need at ``step_ms`` milliseconds
    per step of one layer, run ``speedup`` times faster than one after another (a batched
    ensemble's measured throughput ratio, say).  An upper bound in steps: every run is
    counted to its cap."""
    steps = sum(point_steps(c) for c in cfgs)
    seconds = steps * step_ms / 1000.0 / speedup
    return Estimate(len(cfgs), steps, seconds, chunk_s, math.ceil(seconds / chunk_s))


# -- stopping a run in progress ----------------------------------------------------------

class BudgetSpent(BaseException):
    """A run stopped by its :func:`deadline`.  A BaseException, as KeyboardInterrupt is: no
    ``except Exception`` on its way (a worker's failed record, a layer's own handler) takes
    it for the run's failure."""


@dataclasses.dataclass(frozen=True)
class Limit:
    """What a run may spend: wall time until ``wall_until`` (``time.time()``, the same in
    every process), and ``cpu_s`` seconds of its process's CPU time from its start."""

    wall_until: float | None = None
    cpu_s: float | None = None


def _raise_in(thread_id: int, exc) -> None:
    """Raise ``exc`` (a class) in the thread ``thread_id`` at its next Python instruction;
    None drops one sent and not yet raised."""
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               None if exc is None else ctypes.py_object(exc))


@contextlib.contextmanager
def deadline(limit: Limit | None, poll_s: float = 0.05):
    """Raise :class:`BudgetSpent` in this thread once ``limit`` is spent (None: no limit).

    A daemon thread looks at the clocks every ``poll_s`` seconds (CPU time: this
    process's, every thread's, as a record's ``cpu_s``); the exception comes at the
    running thread's next Python instruction, so a layer's forward that sleeps or a torch
    op ends first.  Any thread can be stopped this way, a worker's main thread or this
    one, and no signal handler is taken from anyone."""
    if limit is None or (limit.wall_until is None and limit.cpu_s is None):
        yield
        return
    cpu_until = None if limit.cpu_s is None else time.process_time() + limit.cpu_s

    def spent() -> bool:
        return ((limit.wall_until is not None and time.time() >= limit.wall_until)
                or (cpu_until is not None and time.process_time() >= cpu_until))

    if spent():
        raise BudgetSpent("the budget was spent before the run started")
    target, done, lock = threading.get_ident(), threading.Event(), threading.Lock()

    def watch() -> None:
        while not done.wait(poll_s):
            if spent():
                with lock:
                    if not done.is_set():
                        _raise_in(target, BudgetSpent)
                return

    watcher = threading.Thread(target=watch, name="recallbench-deadline", daemon=True)
    watcher.start()
    try:
        yield
    except BudgetSpent as exc:
        if exc.args:
            raise
        raise BudgetSpent("the budget ran out while the run trained") from None
    finally:
        with lock:
            done.set()
            _raise_in(target, None)
        watcher.join()


class LimitedRun:
    """``runner(cfg, progress)`` (default :func:`recallbench.harness.train.run`) under the
    :func:`deadline` of ``limit``: the runner of
    :func:`recallbench.runs.worker.run_configs`, picklable for a worker process."""

    preload = ("recallbench.harness.train",)  # what a worker imports before it is ready

    def __init__(self, limit: Limit, runner: Callable | None = None):
        self.limit, self.runner = limit, runner

    def __call__(self, cfg, progress: bool | None = None):
        runner = self.runner
        if runner is None:
            from recallbench.harness.train import run as runner
        with deadline(self.limit):
            return runner(cfg, progress=progress)


@contextlib.contextmanager
def limited(executor, limit: Limit | None):
    """While inside: ``executor`` (``inprocess`` or ``processes``) runs each point under
    ``limit``, its runner wrapped in a :class:`LimitedRun`; a point stopped comes back as
    :class:`BudgetSpent` (raised in this process, or a worker's result)."""
    if limit is None:
        yield
        return
    before = executor.runner
    executor.runner = LimitedRun(limit, before)
    try:
        yield
    finally:
        executor.runner = before


def fitting_facts(num_facts: int, rate: float, left: float, measured) -> int | None:
    """The N_f to measure instead of ``num_facts`` when its cell would not fit in ``left``
    seconds at ``rate`` seconds per token of L: the largest N_f below it whose cell fits
    (rate·4·N_f ≤ left), if that is still beyond every N_f ``measured``; else None (a next
    cell at or below those measured, or no rate yet).

    >>> fitting_facts(163, rate=305 / 36, left=1500, measured=[9])  # 4·N_f·rate ≤ 1500 s
    44
    >>> fitting_facts(12, rate=10.0, left=100, measured=[9, 15]) is None  # not beyond them
    True
    """
    if rate <= 0 or not measured or num_facts <= max(measured):
        return None
    fit = min(int(num_facts) - 1, math.floor(left / (4 * rate)))
    return fit if fit > max(measured) else None


def cell_limit(left: float, runs: int, cpu: bool) -> Limit:
    """What each of a cell's ``runs`` may spend of the ``left`` seconds of a card's budget:
    a wall deadline, or an equal share of the CPU seconds (runs in parallel add theirs up)."""
    return Limit(cpu_s=max(left, 0.0) / runs) if cpu else Limit(wall_until=time.time() + left)


def card_ending(result, store) -> tuple[int, str | None, bool]:
    """How ``recallbench capacity`` ends a search's ``result`` (either method's): its exit
    status, a last line (or None), and whether its card is written.

    * every run of a cell failed (``result.failed``): 1, the reason, and no card: a card of
      runs that never ran would read as a bound;
    * stopped by a time or CPU budget before any run finished: :data:`EXIT_BUDGET`, no card;
    * method 2 stopped by its wall-time limit (``result.finished`` False): EXIT_BUDGET, and
      the card so far; the same command continues;
    * else 0 and the card."""
    if getattr(result, "failed", False):
        return 1, (f"recallbench: error: {result.stopped}; no card written (the store "
                   f"{store} keeps the runs: fix the model, then rerun the same command)"), False
    if not result.records:
        line = (f"no card: the budget ran out ({result.stopped.split(':')[0]}) before any run "
                f"finished; give a larger one (the same command continues from {store})")
        return EXIT_BUDGET, line, False
    if not getattr(result, "finished", True):
        return EXIT_BUDGET, (f"unfinished ({result.stopped}): the same command continues "
                             f"from {store}"), True
    return 0, None, True
