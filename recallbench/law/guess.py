"""Guessing: which accuracies are evidence of recall, and what a model that never shows
any is told (docs/theory.md, "Guessing").

A model that knows which values occur in its context, but not which key owns each,
answers right with probability g, the task's guess level (``Task.guess_level``: 1/N_f for
MQAR and AR).  Accuracy at g is no evidence that the state holds a single binding, so

* :func:`recall_test`: a cell shows recall when its accuracy is above g at the 95% level,
  one-sided.  The queries of one sequence share one state and are correlated, so the test
  counts *sequences*, not queries: a sequence's accuracy lies in [0, 1] with mean p, so
  its variance is at most p(1 − p), and u sequences give at least the information of u
  independent queries (the worst design effect: every query of a sequence alike);
* a cell that fails the test is "no recall" and adds nothing to S_eff;
* :func:`no_recall_bound`: a model with no cell above its guess gets "no recall beyond
  guessing": S_eff 0 with an upper bound, the profile-likelihood bound of the guess-aware
  law (p = g + (1 − g)·law) on the sequence counts, each cell read at the accuracy most
  favourable to the model that the test allows (below-guess counts lifted to g).

    >>> from recallbench.law import guess
    >>> # MQAR N_f = 16 (g = 1/16), 1,024 test sequences of 16 queries each
    >>> guess.recall_test(correct=1100, total=16384, units=1024, guess=1/16)[0]   # 0.067
    False
    >>> guess.recall_test(correct=1500, total=16384, units=1024, guess=1/16)[0]   # 0.092
    True
"""
from __future__ import annotations

import functools
import math
from typing import Mapping

import numpy as np
from scipy import stats

from recallbench.api.canonical import canonical_json
from recallbench.api.errors import ConfigError
from recallbench.api.registry import TASKS
from recallbench.law import fit


@functools.lru_cache(maxsize=4096)
def _task_facts(task_json: str) -> tuple[float, int] | None:
    import json
    params = dict(json.loads(task_json))
    name = params.pop("name", "mqar")
    try:
        task = TASKS.get(name).from_params(params)
    except ConfigError:  # an unknown task, or one that no longer validates
        return None
    return float(task.guess_level(1)), int(task.num_queries)


def task_facts(task_cfg: Mapping) -> tuple[float, int] | None:
    """(guess level g, queries per sequence) of a record's task section, from the task
    plugin's own declaration; None when the task is not registered here."""
    return _task_facts(canonical_json(dict(task_cfg)))


def units(total: int, queries_per_sequence: int) -> int:
    """The independent units of a test of ``total`` queries: its sequences."""
    q = max(int(queries_per_sequence), 1)
    return max(1, int(total) // q) if total else 0


def recall_test(correct, total, units, guess, level: float = 0.95, draws: int = 1):
    """(recall, lower): is the accuracy above the guess level ``guess``?

    ``lower`` is the one-sided Clopper-Pearson lower bound of the accuracy on ``units``
    sequences (the counts scaled to sequences, see the module doc) at ``level``;
    ``recall`` is ``lower > guess``.  ``draws`` > 1: the accuracy is the best of that many
    seeds, so each must pass at the Šidák level ``level**(1/draws)`` for the best to hold
    at ``level``.
    """
    if not total or not units:
        return False, 0.0
    u = float(units)
    k = float(correct) * u / float(total)
    alpha = 1.0 - level ** (1.0 / max(int(draws), 1))
    lower = 0.0 if k <= 0 else float(stats.beta.ppf(alpha, k, u - k + 1.0))
    return bool(lower > guess), lower


def judge(correct, total, facts: tuple[float, int], level: float = 0.95, draws: int = 1):
    """(recall, lower, units) of ``correct`` of ``total`` queries of a task whose
    :func:`task_facts` are ``facts``: :func:`recall_test` on its :func:`units`."""
    g, per_sequence = facts
    u = units(total, per_sequence)
    return (*recall_test(correct, total, u, g, level, draws), u)


def no_recall_bound(correct, total, units, guess, d_model, num_facts, vocab_size,
                    family: str = "mqar", scale=1.0, form: str = "eq19",
                    level: float = 0.95) -> float:
    """The largest θ (N_eff, or S_eff/S with ``scale``; see ``fit.fit_effective_state``)
    that cells showing no recall leave possible: the upper end of the profile-likelihood
    interval of the guess-aware fit on sequence counts, each count lifted to at least its
    guess level (the reading most favourable to the model).  ``inf`` when the cells do
    not limit it."""
    k, n, u, g = (np.atleast_1d(np.asarray(x, float))
                  for x in np.broadcast_arrays(correct, total, units, guess))
    keep = (n > 0) & (u > 0)
    k_u = np.where(keep, k * u / np.where(n > 0, n, 1.0), 0.0)
    k_u = np.maximum(k_u, g * u)
    f = fit.fit_effective_state(k_u[keep], u[keep], np.broadcast_to(d_model, k.shape)[keep],
                                np.broadcast_to(num_facts, k.shape)[keep],
                                np.broadcast_to(vocab_size, k.shape)[keep], family=family,
                                scale=np.broadcast_to(scale, k.shape)[keep], form=form,
                                level=level, overdispersion=False, guess=g[keep])
    hi = f.theta_ci[1]
    return math.inf if hi is None else float(hi)
