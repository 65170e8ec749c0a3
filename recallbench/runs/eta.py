"""What a batch of runs will cost, from measured step times: the ``--dry-run`` of
``recallbench capacity`` and ``recallbench leaderboard run``, and their progress ETAs.

    sec = step_seconds(config)                 # measured: two short runs, the difference
    lo, hi = run_seconds(config, sec)          # one run: earliest stop .. its step cap
    text = minutes(lo) + " to " + minutes(hi)

A step's time is measured, never assumed: the config is trained for 2 and for 32 steps,
twice each (tiny validation and test sets, no validation in between), and the difference
of the fastest of each over the 30 extra steps is the time of one step, so start-up and
testing cancel out and a busy machine's pauses mostly drop out (a run of 2 steps before
them warms up).  A run then
takes between the steps of its earliest possible stop (a plateau after ``patience``
validations, else its cap) and its step cap (``max_steps_limit`` when it may be
extended), times its learning-rate candidates.
"""
from __future__ import annotations

import copy
import time
from typing import Any, Mapping

SHORT, LONG = 2, 32


def step_seconds(config: Mapping[str, Any]) -> float:
    """Seconds of one training step of ``config`` (a resolvable config dict), measured."""
    from recallbench.harness.train import run

    times = []
    # a first run pays one-off costs (Lightning's first Trainer, the model's first forward
    # at this shape): warm up, or the short run is the slower one and the difference says
    # nothing
    for steps in (SHORT, SHORT, LONG, SHORT, LONG):
        cfg = copy.deepcopy(dict(config))
        cfg["train"] = {**dict(cfg.get("train") or {}), "lr": 0.01, "max_steps": steps,
                        "max_steps_limit": None, "patience": None, "early_stop": None,
                        "val_size": 8, "test_size": 8, "val_every": 10 ** 6,
                        "progress": False}
        cfg["train"].pop("recipe", None)
        t = time.perf_counter()
        run(cfg, progress=False)
        times.append(time.perf_counter() - t)
    short, long = min(times[1::2]), min(times[2::2])
    return max((long - short) / (LONG - SHORT), 1e-4)


def run_seconds(config: Mapping[str, Any], step_s: float) -> tuple[float, float]:
    """(earliest, latest) seconds of one run of ``config`` at ``step_s`` a step."""
    train = dict(config.get("train") or {})
    lrs = train.get("lr")
    n_lr = len(lrs) if isinstance(lrs, list) else 6 if lrs == "auto" else 1
    cap = max(int(train.get("max_steps") or 0), int(train.get("max_steps_limit") or 0))
    patience, every = train.get("patience"), int(train.get("val_every") or 50)
    first = min(cap, (int(patience) + 1) * every) if patience else cap
    return n_lr * first * step_s, n_lr * cap * step_s


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def remaining(elapsed: float, done: int, total: int) -> str:
    """'about N min left' at the pace so far (``done`` of ``total`` finished)."""
    if done <= 0 or total <= done:
        return "" if total <= done else "ETA after the first point"
    return f"about {minutes(elapsed / done * (total - done))} left at this pace"
