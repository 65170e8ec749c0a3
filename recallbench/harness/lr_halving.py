"""A learning-rate search by successive halving (``train.lr_rung``): the candidates are
compared early, and only the best trains on.

    record = run({"train": {"lr": [0.003, 0.01, 0.03], "lr_rung": 0.25, ...}, ...})
    record["lr_search"][i]["rungs"]     # [[steps, val_accuracy], ...] it was compared at

* **Rung**: every candidate trains ``lr_rung · max_steps`` steps (down to the validation
  grid, at least one validation) under the schedule of the whole run (:func:`rung_steps`):
  its learning rate is the one the full run has there, not annealed, so the rung is a
  point of the run each candidate would train alone (Jamieson & Talwalkar, 2016; Li et al.,
  2018, Hyperband, with one bracket and the rest of the budget to the winner).
* **Compared** on VALIDATION accuracy (the best so far), never the test set, by the rule of
  the full search (:func:`recallbench.harness.lr_candidates.choose`).  A candidate still at
  the guess level (:attr:`History.left_guess`) beside one that left it is dropped; when
  none has left it, the comparison cannot tell them apart and every one trains to the
  next rung (the rung doubled; at ``max_steps`` they are compared as the full search
  compares them).  A diverged candidate is kept out; if the winner diverges past the rung
  the next best goes on instead.
* **Winner**: the best goes on from its in-memory state (weights, AdamW, scheduler, data
  position, RNG: :func:`recallbench.harness.single.go_on`) to ``max_steps``, and then, with
  ``max_steps_limit``, extends as in :mod:`recallbench.harness.lr_search`: step for step
  the run its lr trains alone (``tests/test_lr_halving.py``).  A candidate that stopped
  before the rung (early_stop, plateau) is final; if it is the best, nothing goes on.
* **Record**: as the full search's; each ``lr_search`` entry holds what that candidate
  trained (its steps, best validation accuracy, convergence) and ``rungs``, the
  ``[steps, val_accuracy]`` it was compared at.  Every candidate that is not the winner
  trained only to a rung, so the record's training work counts only what was trained.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from recallbench.api.config import RunConfig, TrainConfig
from recallbench.api.errors import reason
from recallbench.api.recipes import paper_steps
from recallbench.harness.lr_candidates import announce, candidates, entry, ranked, searched_record


def rung_steps(tc: TrainConfig) -> int | None:
    """The first rung: ``lr_rung · max_steps`` down to the validation grid (at least its
    first validation); None without ``lr_rung`` or when that is not before ``max_steps``."""
    if tc.lr_rung is None or tc.max_steps <= 0:
        return None
    every = min(tc.val_every, tc.max_steps)
    k = max(1, math.floor(tc.lr_rung * tc.max_steps / every + 1e-9))
    return _on_grid(tc, k * every)


def _on_grid(tc: TrainConfig, step: int) -> int | None:
    """``step`` as a validation step of ``tc`` (the paper's loop validates one step later),
    None when it is not before ``max_steps``."""
    step += 1 if paper_steps(tc.recipe) else 0
    return step if step < tc.max_steps else None


def run_halving(cfg: RunConfig, device: torch.device, show: bool, weights=None,
                report=None) -> dict[str, Any]:
    """The search of ``cfg``'s lr list by halving (module doc); the record of the winner."""
    from recallbench.harness.lr_search import _sequential, _with_limit
    from recallbench.harness.module import DivergedError
    from recallbench.harness.single import extend, go_on, train_one

    tc = cfg.train
    rung = rung_steps(tc)
    cands = candidates(cfg)
    if rung is None:  # no rung before max_steps: the full search
        return _sequential(cfg, cands, device, show, weights, report)
    limit = tc.max_steps_limit
    extending = limit is not None and limit > tc.max_steps
    cands = [_with_limit(c, None) for c in cands]
    n = len(cands)
    entries: list[dict] = [{}] * n
    runs: dict[int, Any] = {}  # index -> its latest Trained, while it may still be chosen
    spent = [0.0] * n

    def note(i, t, error=None, compared=True):
        if t is None:
            entries[i] = {**entry(cands[i].train.lr, None, 0, False, error), "rungs": []}
            runs.pop(i, None)
            return
        spent[i] = t.train_s
        runs[i] = t
        rungs = list(entries[i].get("rungs") or [])
        if compared:
            rungs.append([t.steps, t.val_accuracy])
        entries[i] = {**entry(t.cfg.train.lr, t.val_accuracy, t.steps,
                              t.convergence()["converged"]), "rungs": rungs}

    def train(i, t=None, pause_at=None, compared=True):
        if report is not None and t is None:
            report.candidate(i, n, cands[i].train.lr, tc.max_steps, limit)
        try:
            t = (train_one(cands[i], device, False, checkpoint=extending, report=report,
                           pause_at=pause_at) if t is None else
                 go_on(t, device, checkpoint=extending, report=report, pause_at=pause_at))
        except DivergedError as exc:
            note(i, None, reason(exc))
        else:
            note(i, t, compared=compared)

    for i in range(n):
        train(i, pause_at=rung)
        announce(show, entries[i], i, n)
    while True:
        if not runs:
            first = next(e["error"] for e in entries if e["error"])
            raise DivergedError(f"every learning rate of {n} diverged (first: {first})")
        left = [i for i in runs if runs[i].module.history.left_guess]
        if left:  # the guessers beside one that learned are dropped
            for i in set(runs) - set(left):
                del runs[i]
        paused = [i for i in runs if runs[i].paused]
        if not paused:
            break
        if left:
            winner = None
            for i in [i for i in ranked(entries) if i in runs]:
                if runs[i].paused:
                    train(i, runs[i], compared=False)  # the winner, to its cap
                if i in runs:
                    winner = i
                    break
            for i in set(runs) - {winner}:
                del runs[i]
            continue  # at its cap, or stopped before: the loop ends
        rung = _on_grid(tc, 2 * rung - (1 if paper_steps(tc.recipe) else 0))
        for i in paused:
            train(i, runs[i], pause_at=rung)
    best_i = ranked([entries[i] if i in runs else {**entries[i], "val_accuracy": None}
                     for i in range(n)])[0]
    best = runs[best_i]
    if extending and not best.convergence()["converged"]:
        try:
            t = extend(best, limit, device, report=report)
        except DivergedError:
            pass  # diverged past the cap: the capped run stands
        else:
            best = t
            spent[best_i] = t.train_s
            entries[best_i] = {**entry(t.cfg.train.lr, t.val_accuracy, t.steps,
                                       t.convergence()["converged"]),
                               "rungs": entries[best_i]["rungs"]}
    if weights is not None:
        best.save_weights(weights)
    return searched_record(best.record(device), cfg, entries, sum(spent))
