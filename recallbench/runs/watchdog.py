"""The per-point watchdog of the processes executor: how long a point may run unreported.

A worker that has not reported its point by the deadline (a hang, a stopped process, a
deadlock in native code) is killed, a fresh worker takes its slot, and the point is
retried once; the second time it is recorded as failed, "no report within N s: killed".
So a sweep's driver never waits without bound.

The deadline is ``--point-timeout SECONDS`` when given, else a default from the point's
step cap, far above what a point should take::

    timeout = START_S + MARGIN x steps x STEP_S

where ``steps`` is the item's layer-steps (each point's ``max_steps``, or
``max_steps_limit`` when larger, x its layers x its learning-rate candidates, summed over
the points of a batched ensemble), ``STEP_S`` an assumed slow step of one layer (the small
models here take a few milliseconds a step on one CPU thread), ``MARGIN`` a safety factor
and ``START_S`` the point's own start-up (model, data, a CUDA context, compiling).  A
worker that is not ready within :data:`WORKER_START_S` of its start is handled the same
way.
"""
from __future__ import annotations

from typing import Sequence

from recallbench.api.errors import ConfigError

#: seconds for a point's own start-up before its first step
START_S = 120.0
#: an assumed slow step of one layer, in seconds
STEP_S = 0.05
#: the default deadline is this many times the steps' assumed time
MARGIN = 4.0
#: seconds a fresh worker process may take to be ready (interpreter, torch import)
WORKER_START_S = 300.0
#: --point-timeout bounds, seconds
MIN_S, MAX_S = 0.1, 1e7

HELP = (f"--executor processes: kill a worker that has not reported its point within this "
        f"many seconds, retry the point once, then record it failed ('no report within N s: "
        f"killed'); default per point: {START_S:g} + {MARGIN:g} x steps x {STEP_S:g} s, "
        f"steps = its step cap (max_steps, or max_steps_limit if larger) x layers x lr "
        f"candidates (summed over an --ensemble batch); in [0.1, 1e7]")


class PointTimeout(RuntimeError):
    """A point's worker did not report in time and was killed."""


def check_point_timeout(seconds: float | None, executor: str | None = "processes",
                        flag: str = "--point-timeout") -> None:
    """One line naming the flag and its range when ``seconds`` is not usable (or is given
    to an executor that cannot kill a point)."""
    if seconds is None:
        return
    if not MIN_S <= seconds <= MAX_S:  # NaN fails too
        raise ConfigError(f"{flag} {seconds:g}: must be in [0.1, 1e7] seconds")
    if executor is not None and executor != "processes":
        raise ConfigError(f"{flag} is for --executor processes (a worker it can kill)")


def layer_steps(config: dict) -> int:
    """A config dict's step cap x layers x lr candidates (its cost in steps of one layer)."""
    train, model = config.get("train") or {}, config.get("model") or {}
    cap = max(int(train.get("max_steps") or 0), int(train.get("max_steps_limit") or 0))
    lr = train.get("lr")
    return cap * int(model.get("n_layers") or 1) * (len(lr) if isinstance(lr, list) else 1)


def default_timeout(item: Sequence[dict]) -> float:
    """The default deadline of one work item (a point, or an ensemble batch)."""
    return START_S + MARGIN * STEP_S * sum(layer_steps(c) for c in item)


def item_timeout(item: Sequence[dict], fixed: float | None = None) -> float:
    """``fixed`` when given (``--point-timeout``), else :func:`default_timeout`."""
    return fixed if fixed is not None else default_timeout(item)


def timed_out(seconds: float) -> PointTimeout:
    return PointTimeout(f"no report within {seconds:g} s: killed (twice)")
