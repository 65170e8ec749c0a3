"""A method-2 card's dry-run ETA: CPU time from the fewest runs a measured card has to what
a widely scattering layer needs, each end capped by the work budget left.

    lo, hi, cap = eta_seconds(base, step_s=0.01, nf=8, runs_done=0, work_left_mtok=300)
    print("ETA: " + eta_text(lo, hi, cap, workers=2))
"""
from __future__ import annotations

from typing import Mapping

from recallbench.law import run_card
from recallbench.runs.card_search import DEFAULT_WORK_MTOK

#: the runs a card takes, for a dry run's ETA: the fewest a measured card has, and about what
#: a layer whose runs scatter with SD 0.5 probit and whose curve falls slowly in N_f needs
#: for a 1.3x interval (some 130: docs/results/capacity/README.md); the upper end also lets
#: every run be extended once
ETA_RUNS = (run_card.MIN_OBSERVED, 130)


def eta_seconds(base: Mapping, step_s: float, nf: int, runs_done: int = 0,
                work_left_mtok: float = DEFAULT_WORK_MTOK) -> tuple[float, float, float]:
    """CPU seconds a card still needs, (low, high, the work budget's): a run's steps are
    the halving's candidates (each ``lr_rung`` of max_steps) and the rest of the chosen
    one's (all candidates in full without ``lr_rung``); :data:`ETA_RUNS` less the runs
    done, at ``step_s`` a step of N_f = ``nf``; each end at most the work budget left."""
    train = base["train"]
    n_lr = len(train["lr"]) if isinstance(train["lr"], list) else 1
    rung = train.get("lr_rung")
    steps = int(train["max_steps"]) * ((n_lr - 1) * rung + 1 if rung else n_lr)
    cap = max(work_left_mtok, 0.0) * 1e6 / (int(train["batch_size"]) * 4 * nf) * step_s
    lo, hi = (max(k - runs_done, 0) * steps * step_s for k in ETA_RUNS)
    return min(lo, cap), min(2 * hi, cap), cap


def eta_text(lo: float, hi: float, cap: float, workers: int = 1) -> str:
    """One line for :func:`eta_seconds` (CPU minutes, and wall time on ``workers``)."""
    return (f"about {lo / 60:.1f} CPU-min ({ETA_RUNS[0]} runs, the fewest a measured card "
            f"has) to {hi / 60:.1f} ({ETA_RUNS[1]} runs each extended once, as a layer whose "
            f"runs scatter widely needs); the work budget stops it by {cap / 60:.1f}; wall "
            f"time {lo / 60 / workers:.1f} to {hi / 60 / workers:.1f} min on {workers} "
            "worker(s)")
