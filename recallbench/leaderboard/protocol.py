"""A point's training-protocol facts agree with its config and with each other.

A point copies from its record the learning rate kept (``lr``), the search that chose it
(``lr_search``), and whether the run converged (``converged``, ``stop_reason``,
``steps_to``).  :mod:`recallbench.leaderboard.schema` checks their types; this module
checks what they claim, so that a file cannot present an unconverged run as converged or
a learning rate that the search would not have chosen:

* where the point's ``train.lr`` is a list (a search), ``lr_search`` tries exactly those
  learning rates, and ``lr`` is the one the harness's rule picks from it
  (:func:`recallbench.harness.lr_candidates.choose`: best validation accuracy, then fewer
  steps, then the smaller lr), whose ``converged`` the point repeats; a point whose run was
  ``extended`` (:mod:`recallbench.harness.lr_search`: only the candidate chosen at
  ``max_steps`` goes on) has a candidate of the best validation accuracy, its own; a search
  by successive halving (entries with ``rungs``: :mod:`recallbench.harness.lr_halving`)
  keeps a candidate with the best validation accuracy at the last rung where two or more
  candidates without an error were compared;
* where it is one number, ``lr`` is that number and there is no ``lr_search``;
* a run that stopped at ``early_stop`` or on a ``plateau`` converged;
* ``steps_to`` never decreases from 0.5 to 0.99, and no step lies beyond ``steps``.
"""
from __future__ import annotations

import math
from typing import Mapping

from recallbench.leaderboard.checks import need
from recallbench.leaderboard.schema import LEVELS


def _close(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)


def check_lr(p: Mapping, run_lr, where: str) -> None:
    """``lr`` and ``lr_search`` of a point whose config has ``train.lr = run_lr``."""
    from recallbench.harness.lr_candidates import choose

    search = p.get("lr_search")
    if not isinstance(run_lr, list):
        need(_close(p["lr"], run_lr), f"{where}: lr", f"{p['lr']:g} is not the config's train.lr "
             f"{run_lr:g}")
        need(search is None, f"{where}: lr_search", "must be null: the config trains one lr")
        return
    need(search is not None, f"{where}: lr_search",
         "is required: the config's train.lr is a search")
    tried = sorted(float(e["lr"]) for e in search)
    need(len(tried) == len(run_lr) and all(_close(a, b) for a, b in zip(tried, run_lr)),
         f"{where}: lr_search", "does not try exactly the config's train.lr list")
    best = choose(search)
    if best is None:
        untrained = all(e["steps"] == 0 and e["error"] is None for e in search) and p.get("steps") == 0
        need(untrained, f"{where}: lr_search", "has no candidate with a validation accuracy "
             "(only a model with nothing to train, 0 steps everywhere, may have none)")
        need(_close(p["lr"], tried[0]), f"{where}: lr",
             f"{p['lr']:g} is not the smallest of the list ({tried[0]:g}), which an untrained "
             "point keeps")
        return
    if "rungs" in search[0]:
        best = _halving_choice(p, search, where)
    elif p.get("extended"):
        # the search chose at max_steps, then trained the chosen one on (extended): its
        # entry holds the extended run, whose best validation only rose, and whose added
        # steps may lose a tie it had won at the cap; none may beat it
        kept = next((e for e in search if _close(e["lr"], p["lr"])), None)
        top = max(e["val_accuracy"] for e in search if e["val_accuracy"] is not None)
        need(kept is not None and kept["val_accuracy"] is not None
             and kept["val_accuracy"] >= top, f"{where}: lr",
             f"{p['lr']:g} is not a candidate with the best validation accuracy of the "
             "search (an extended run keeps the candidate chosen at max_steps)")
        best = search.index(kept)
    else:
        need(_close(p["lr"], search[best]["lr"]), f"{where}: lr",
             f"{p['lr']:g} is not the one the search chooses ({search[best]['lr']:g}: best "
             "validation accuracy, then fewer steps, then the smaller lr)")
    if p.get("converged") is not None:
        need(p["converged"] == search[best]["converged"], f"{where}: converged",
             "differs from the chosen candidate's in lr_search")


def _halving_choice(p: Mapping, search: list, where: str) -> int:
    """The index of the kept candidate of a search by halving, checked: none of the
    candidates compared at the deciding rung (the last one two or more error-free
    candidates reached, with those that stopped on their own before it at their final,
    best-so-far validation) had a higher validation accuracy there."""
    kept = next((i for i, e in enumerate(search) if _close(e["lr"], p["lr"])), None)
    need(kept is not None, f"{where}: lr", f"{p['lr']:g} is not a candidate of lr_search")
    at: dict[int, dict[int, float]] = {}
    for i, e in enumerate(search):
        for steps, acc in e["rungs"] if e["error"] is None else ():
            if acc is not None:
                at.setdefault(steps, {})[i] = acc
    shared = [s for s, accs in at.items() if len(accs) >= 2]
    if shared:
        deciding = max(shared)
        accs = dict(at[deciding])
        for i, e in enumerate(search):  # stopped on its own before it: final, compared too
            last = [(s, a) for s, a in (e["rungs"] if e["error"] is None else ())
                    if a is not None]
            if last and e.get("converged") and last[-1][0] < deciding:
                accs.setdefault(i, last[-1][1])
        need(kept in accs and accs[kept] >= max(accs.values()), f"{where}: lr",
             f"{p['lr']:g} is not a candidate with the best validation accuracy at the "
             f"rung of {deciding} steps where the search compared its candidates")
    return kept


def check_convergence(p: Mapping, where: str) -> None:
    """``stop_reason`` against ``converged``, and ``steps_to`` against ``steps``."""
    if p.get("stop_reason") in ("early_stop", "plateau"):
        need(p.get("converged") is True, f"{where}: converged",
             f"must be true for a run that stopped at {p['stop_reason']}")
    steps_to = p.get("steps_to")
    if steps_to is None:
        return
    reached = [steps_to[k] for k in LEVELS if steps_to[k] is not None]
    need(reached == sorted(reached), f"{where}: steps_to",
         "a higher accuracy level cannot be reached before a lower one")
    need(p.get("steps") is None or all(s <= p["steps"] for s in reached), f"{where}: steps_to",
         "holds a step beyond the run's steps")


def check_point_protocol(p: Mapping, run_lr, where: str) -> None:
    """Both checks of a point (its fields' types already checked)."""
    check_convergence(p, where)
    check_lr(p, run_lr, where)
