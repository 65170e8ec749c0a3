"""Theory-guided search: fit the law's a with a few runs placed near the phase boundary.

    out = adaptive_search(base_config, candidates=[(D, N), ...], runner=train.run, tol=0.10)
    out["a"], out["a_ci"], out["runs"]

The model is the collapse of :func:`recallbench.law.fit.fit_collapse`, p(D, N) = Φ(x − b) with
x = √(Λ·N·D / (a·N_f + Λ·N)), started at a₀ = ``theory.coefficient_a(kind, family)`` (the
adapter's declared law kind, else ``linear``; the task's family) and b₀ = m_V (eq. 20).  Each
round places ``batch`` runs on candidate cells not yet run whose predicted recall lies in
``p_range`` (default 0.05–0.95; if none, the nearest), picked greedily to reduce the variance
of log a most (D-optimal under the binomial probit model's Fisher information at the current
(a, b)); runs them (``runner(config) -> record``) and refits (a, b) on every successful record
(the prior keeps placing runs while the fit is unbounded).  After at least ``min_runs`` (default
max(8, 2·batch)) it stops by ``stop``: ``"interval"`` (default: a's 95% CI half-width ≤ ``tol``·a
and a inside the previous round's CI), ``"stable"`` (the last three rounds' a within ``tol``/2
of the newest: trained runs scatter too much for the interval rule) or ``"either"``; or at
``max_runs`` runs, or with no candidate left.  No randomness of its own: a deterministic runner
gives the same runs and fit.  Cells with N > D are dropped, as the paper's grids skip them.
How well it does on trained grids: docs/results/adaptive/README.md.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import special

from recallbench.law import declared, theory
from recallbench.law.fit import fit_collapse

Runner = Callable[[Mapping[str, Any]], dict]
STOP_RULES = ("interval", "stable", "either")
#: predicted recall of the cells a round may pick (see the module doc, step 2)
P_RANGE = (0.05, 0.95)
STABLE_ROUNDS = 3  # "stable": this many consecutive fits agree


def _default_runner(config):
    from recallbench.harness.train import run

    return run(config)


def cell_config(base_config: Mapping[str, Any], d_model: int, d_state: int) -> dict:
    """``base_config`` with model.d_model = D and model.d_state = N."""
    cfg = copy.deepcopy(dict(base_config))
    cfg["model"] = {**dict(cfg.get("model") or {}), "d_model": int(d_model),
                    "d_state": int(d_state)}
    return cfg


def _law_inputs(base_config: Mapping[str, Any]) -> dict[str, Any]:
    from recallbench.api.config import resolve

    cfg = resolve(base_config)
    task = cfg.task
    kind = declared.model_kind(cfg.model.adapter) or "linear"
    return {"family": declared.task_family(cfg.task_name), "vocab_size": task.vocab_size,
            "num_facts": task.num_facts, "n_layers": cfg.model.n_layers, "kind": kind,
            "queries": cfg.train.test_size * task.num_queries}


def _points(records: Sequence[dict]):
    rows = []
    for r in records:
        if r.get("status") != "ok" or not r.get("total"):
            continue
        c = r["config"]
        rows.append((r["correct"], r["total"], c["model"]["d_model"], c["model"]["d_state"],
                     c["task"]["num_facts"], c["task"]["vocab_size"], c["model"]["n_layers"]))
    return np.array(rows, float).reshape(-1, 7)


def _predict(cells: np.ndarray, a: float, b: float, nf: float, lam: float):
    """p, z = x − b and g = (∂z/∂log a, ∂z/∂b) of each cell (D, N)."""
    d, n = cells[:, 0], cells[:, 1] * lam
    x = np.sqrt(n * d / (a * nf + n))
    z = x - b
    dz_dloga = -0.5 * x * (a * nf) / (a * nf + n)
    g = np.stack([dz_dloga, -np.ones_like(x)], axis=1)
    return special.ndtr(z), z, g


def _information(cells, a, b, nf, lam, queries):
    """Fisher information matrices (one per cell) of (log a, b) for ``queries`` binomial trials."""
    p, z, g = _predict(cells, a, b, nf, lam)
    w = queries * np.exp(-z * z) / (2 * math.pi) / np.clip(p * (1 - p), 1e-300, None)
    return w[:, None, None] * g[:, :, None] * g[:, None, :], p


def choose_cells(candidates: np.ndarray, done: np.ndarray, a: float, b: float, nf: float,
                 lam: float, queries: float, batch: int,
                 p_range: tuple[float, float] = P_RANGE) -> list[int]:
    """Indices into ``candidates`` of the next ``batch`` cells (see the module doc, step 2)."""
    remaining = np.flatnonzero(~done)
    if len(remaining) == 0:
        return []
    info, p = _information(candidates, a, b, nf, lam, queries)
    inside = remaining[(p[remaining] >= p_range[0]) & (p[remaining] <= p_range[1])]
    if len(inside) < batch:  # too few mid-range cells: add the nearest to the range
        dist = np.maximum(p_range[0] - p, 0) + np.maximum(p - p_range[1], 0)
        outside = remaining[~np.isin(remaining, inside)]
        outside = outside[np.argsort(dist[outside], kind="stable")]
        inside = np.concatenate([inside, outside[:batch - len(inside)]])
    total = info[done].sum(axis=0) + 1e-9 * np.eye(2) * queries  # a weak ridge: always invertible
    chosen: list[int] = []
    pool = list(inside)
    for _ in range(min(batch, len(pool))):
        best, best_var = None, math.inf
        for i in pool:
            m = total + info[i]
            det = m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]
            var = m[1, 1] / det if det > 0 else math.inf  # [M⁻¹]₀₀: variance of log a
            if var < best_var - 1e-15 * abs(best_var if math.isfinite(best_var) else 1.0):
                best, best_var = i, var
        if best is None:
            best = pool[0]
        chosen.append(int(best))
        total = total + info[best]
        pool.remove(best)
    return chosen


def half_width(a: float, ci: tuple[float, float]) -> float:
    """Relative CI half-width (a_hi − a_lo) / (2a); inf when a bound is open."""
    lo, hi = ci
    if not (math.isfinite(hi) and lo > 0 and a > 0):
        return math.inf
    return (hi - lo) / (2 * a)


def adaptive_search(base_config: Mapping[str, Any], candidates: Sequence[tuple[int, int]],
                    runner: Runner | None = None, tol: float = 0.10, max_runs: int = 40,
                    batch: int = 4, min_runs: int | None = None,
                    p_range: tuple[float, float] = P_RANGE, a0: float | None = None,
                    b0: float | None = None, level: float = 0.95, stop: str = "interval",
                    on_round: Callable[[dict], None] | None = None,
                    run_batch: Callable[[list[dict]], list[dict]] | None = None) -> dict[str, Any]:
    """Fit a of the collapse law with few runs (module doc).  Returns a dict:

    ``runs`` (how many were run), ``records`` (in run order), ``cells`` ((D, N) per
    record), ``a``, ``a_ci``, ``b``, ``b_ci``, ``half_width`` (relative), ``converged``
    (half-width ≤ tol), ``stopped`` ("tolerance" | "stable" | "budget" | "exhausted"), ``fit``
    (``CollapseFit.to_dict()`` of the last fit, or None), ``prior`` ({"a", "b"}),
    ``history`` (one dict per round: cells, runs so far, a, a_ci, half_width, and the
    (a, b) the round was placed with).

    ``run_batch(configs) -> records`` runs one round's configs together (e.g. in parallel,
    or served from a result store); the default calls ``runner`` on each in turn.
    """
    if stop not in STOP_RULES:
        raise ValueError(f"stop must be one of {', '.join(STOP_RULES)}, got {stop!r}")
    runner = runner or _default_runner
    search = _Search(base_config, candidates, a0, b0, level)
    min_runs = max(8, 2 * batch) if min_runs is None else min_runs
    stopped = "exhausted"
    while True:
        if len(search.records) >= max_runs:
            stopped = "budget"
            break
        chosen = search.choose(min(batch, max_runs - len(search.records)), p_range)
        if not chosen:
            stopped = "exhausted"
            break
        configs = [cell_config(base_config, *search.cells[i]) for i in chosen]
        got = run_batch(configs) if run_batch is not None else [runner(c) for c in configs]
        if len(got) != len(configs):
            raise RuntimeError(f"run_batch returned {len(got)} records for {len(configs)} configs")
        search.add(chosen, got)
        if on_round is not None:
            on_round(search.history[-1])
        if len(search.records) >= min_runs:
            stopped = search.stop_rule(stop, tol)
            if stopped:
                break
        search.round_done()
    return search.result(stopped or "exhausted", tol)


class _Search:
    """The state of one adaptive search: candidate cells, runs so far, the running fit."""

    def __init__(self, base_config, candidates, a0, b0, level):
        law = _law_inputs(base_config)
        self.law, self.level = law, level
        self.a_prior = float(a0) if a0 is not None else theory.coefficient_a(law["kind"],
                                                                            law["family"])
        self.b_prior = float(b0) if b0 is not None else float(theory.m_v(law["vocab_size"]))
        self.cells = sorted({(int(d), int(n)) for d, n in candidates if 1 <= int(n) <= int(d)})
        if not self.cells:
            raise ValueError("adaptive_search: no candidate cell with 1 <= N <= D")
        self.grid = np.array(self.cells, float)
        self.done = np.zeros(len(self.cells), bool)
        self.place = (self.a_prior, self.b_prior)  # the (a, b) the next round is placed with
        self.prev_ci = (0.0, math.inf)
        self.records: list[dict] = []
        self.run_cells: list[tuple[int, int]] = []
        self.history: list[dict] = []
        self.fit = None
        self.a, self.a_ci, self.b, self.b_ci = math.nan, (0.0, math.inf), math.nan, (-math.inf, math.inf)
        self.hw = math.inf

    def choose(self, take: int, p_range) -> list[int]:
        law = self.law
        return choose_cells(self.grid, self.done, *self.place, law["num_facts"],
                            law["n_layers"], law["queries"], take, p_range)

    def add(self, chosen: list[int], got: list[dict]) -> None:
        """Take one round's records, refit, and note the round in the history."""
        placed_with = self.place
        for i, rec in zip(chosen, got):
            self.done[i] = True
            self.records.append(rec)
            self.run_cells.append(self.cells[i])
        pts = _points(self.records)
        if len(pts) >= 2:
            try:
                self.fit = fit_collapse(*pts.T, family=self.law["family"],
                                        model_kind=self.law["kind"], level=self.level)
            except ValueError:
                self.fit = None
        if self.fit is not None:
            f = self.fit
            self.a, self.a_ci, self.b, self.b_ci = f.a, tuple(f.a_ci), f.b, tuple(f.b_ci)
            self.hw = half_width(self.a, self.a_ci)
            if math.isfinite(self.hw):  # a bounded fit: place the next runs with it
                self.place = (self.a, self.b)
        self.history.append({"round": len(self.history),
                             "cells": [self.cells[i] for i in chosen],
                             "runs": len(self.records),
                             "placed_with": {"a": placed_with[0], "b": placed_with[1]},
                             "a": self.a, "a_ci": self.a_ci, "b": self.b,
                             "half_width": self.hw})

    def stop_rule(self, stop: str, tol: float) -> str | None:
        """"tolerance" or "stable" when that rule (allowed by ``stop``) ends the search."""
        settled = self.prev_ci[0] <= self.a <= self.prev_ci[1]
        if stop != "stable" and self.hw <= tol and settled:
            return "tolerance"
        if stop != "interval" and _stable([h["a"] for h in self.history], tol):
            return "stable"
        return None

    def round_done(self) -> None:
        if self.fit is not None:
            self.prev_ci = self.a_ci

    def result(self, stopped: str, tol: float) -> dict[str, Any]:
        return {"runs": len(self.records), "records": self.records, "cells": self.run_cells,
                "a": self.a, "a_ci": self.a_ci, "b": self.b, "b_ci": self.b_ci,
                "half_width": self.hw, "converged": self.hw <= tol, "stopped": stopped,
                "fit": self.fit.to_dict() if self.fit is not None else None,
                "prior": {"a": self.a_prior, "b": self.b_prior}, "history": self.history,
                "tol": tol, "candidates": len(self.cells)}


def _stable(history_a: Sequence[float], tol: float, rounds: int = STABLE_ROUNDS) -> bool:
    """The last ``rounds`` fitted a (finite) each lie within tol/2 of the newest."""
    last = list(history_a)[-rounds:]
    if len(last) < rounds or not all(math.isfinite(a) and a > 0 for a in last):
        return False
    return all(abs(a - last[-1]) <= 0.5 * tol * last[-1] for a in last)


def fit_records(records: Sequence[dict], family: str = "mqar", model_kind: str | None = "linear",
                level: float = 0.95):
    """``fit_collapse`` on result records (successful ones), e.g. a full grid's."""
    pts = _points(records)
    return fit_collapse(*pts.T, family=family, model_kind=model_kind, level=level)
