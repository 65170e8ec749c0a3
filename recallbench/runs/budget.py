"""A time budget for a run of many points, and the number of budget-sized calls a grid needs.

A long grid runs on a machine lent for a few minutes at a time as repeated calls of the
same command, each stopping cleanly before it would overrun and the next resuming from
the store.  :func:`waves` splits the work items into waves of whole rounds (a round: one
item per parallel worker) and starts no wave that the time left would not hold at the
slowest round seen so far; the first round always runs.  ``recallbench sweep`` and
``recallbench leaderboard run`` both run their items this way::

    for wave in waves(items, executor.parallel, budget_s):
        drive(wave, executor, store, show, tally)

:func:`estimate` is the other half: how many such calls a grid's pending points need,
from their steps and a per-step time the caller measured (an estimate, printed as one).
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Iterator, Sequence, TypeVar

T = TypeVar("T")

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


def wave_size(left: int, parallel: int, budget: float | None, elapsed: float,
              round_s: float | None) -> int:
    """How many items to start now: all without a time budget; one round (``parallel``
    items) when no round has been timed yet; else as many whole rounds as the time left
    holds at ``round_s`` seconds each (0: stop)."""
    if budget is None:
        return left
    if round_s is None:
        return min(left, parallel)
    rounds = int((budget - elapsed) // round_s) if round_s > 0 else left
    return max(0, min(left, rounds * parallel))


def waves(items: Sequence[T], parallel: int, budget: float | None, *,
          clock: Callable[[], float] | None = None,
          start: float | None = None) -> Iterator[Sequence[T]]:
    """The waves of ``items`` to run one after another within ``budget`` seconds counted
    from ``start`` (default: the first call) on ``clock`` (default ``time.monotonic``);
    without a budget, all items as one wave.  The caller runs each wave before asking for
    the next (its time is the round's)."""
    clock = clock or time.monotonic
    start = clock() if start is None else start
    round_s, i = None, 0
    while i < len(items):
        k = wave_size(len(items) - i, parallel, budget, clock() - start, round_s)
        if k == 0:
            return
        t0 = clock()
        yield items[i:i + k]
        rounds = -(-k // parallel)
        round_s = max(round_s or 0.0, (clock() - t0) / rounds)
        i += k


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
