"""The capacity card, method 2: every training run counts, and the headline is N50.

    card = build_run_card(records)     # JSON-ready dict, schema recallbench.card/2
    card["n50"]      # {"value", "ci", "bound"}: N_f recalled at half the queries above the guess
    card["s_eff"]    # the linear reference's state with the same N50 (and card["ratio"] = S_eff/S)
    card["status"]   # "measured", "bound" or "no recall"
    card["state_shape"]  # beside card["state_size"]: {"layers", "heads", "key", "value"} or None

``records``: result records of one model configuration on MQAR (L = 4·N_f, one V), any
number of N_f and seeds.  Each run enters the fit (:func:`recallbench.law.runfit.fit_runs`):
nothing is chosen on the test set, optimisation failures are a fitted rate, seeds scatter
as a fitted run-to-run SD.  S_eff = 2·D·N_eff is anchored at N50: N_eff the Λ·N whose linear
reference (eq. 19, a = 5/4) puts its own 50% point at the model's N50, N_eff =
a·s²·N50/(D − s²), s the 1/σ of p = 1/2 at V (docs/theory.md); the one-parameter law fit
stays beside it with its misfit (its slope at N50 against the fitted one).  **Measured**
when a cell's median run lies on each side of q = 1/2, at least :data:`MIN_OBSERVED` runs
are uncensored, the fitted slope is at most :data:`MAX_SLOPE`, and the N50 interval spans
at most its target (:data:`MAX_SPREAD` unless given, up to 2, where its coverage is
simulated): the fit's interval stretched :data:`WIDEN`-fold about N50 in ln N_f, since the
search stops at the first narrow one (benchmarks/card_looks.py); ``simulated`` names the
fitted values outside the simulated shapes.  Else a **bound** on the side the cells leave
open (N50 ≥ the largest N_f whose median run recalls at least half, where the fit leaves
that end open), or **no recall** when no run is above its guess.  The state's shape
(``state_shape()``, whose product is S; None when not known) stands beside S.
"""
from __future__ import annotations

import functools
import json
import math
from typing import Any, Iterable, Mapping

import numpy as np
from scipy import special

from recallbench.api.canonical import plain
from recallbench.api.errors import ConfigError
from recallbench.law import fit, guess, runfit, theory
from recallbench.law.cells import unconverged

CARD_SCHEMA = "recallbench.card/2"
MAX_SPREAD = 1.3  # the N50 interval: upper / lower at most this (the default target)
#: the targets a card may be given: from the default to 2, where the card's coverage at its
#: stop is simulated (benchmarks/card_looks.py, "target")
SPREAD_RANGE = (MAX_SPREAD, 2.0)
MIN_OBSERVED = 8  # uncensored runs the line needs at least
#: the card's N50 interval is the fit's stretched this much about N50 in ln N_f: the search
#: stops at its first interval within MAX_SPREAD, which selects narrow ones; calibrated on
#: synthetic cards (benchmarks/card_looks.py)
WIDEN = 1.15
#: the fits over which the interval's coverage is simulated (benchmarks/card_coverage.py
#: draws its truths here, from cpu-v3's trained cards): slope in ln N_f, run-to-run SD
#: (probit), failure rate; a card whose fit lies outside says so
SIMULATED = {"slope": (1.0, 1.9), "tau": (0.0, 0.7), "failure_rate": (0.0, 0.1)}
#: the steepest fitted slope a measured card may have: beyond the fits at which simulated
#: cards stopped and covered (benchmarks/card_looks.py, "slope at most"), and beyond every
#: trained card's; a steeper fit narrows the interval (its width goes as τ/β) where no
#: coverage is shown, and the search goes on until the slope settles
MAX_SLOPE = 3.0
KINDS = ("observed", "at the guess", "at the ceiling", "cut by the cap")


def work_tokens(record: Mapping) -> int:
    """Training work of a run: tokens trained over every learning-rate candidate (steps ×
    batch × L, the chosen one's extension included); what a card's budget counts."""
    train, task = record["config"]["train"], record["config"]["task"]
    per_step = int(train.get("batch_size") or 0) * int(task.get("seq_len") or 0)
    search = record.get("lr_search") or [{"steps": record.get("steps") or 0}]
    return per_step * sum(int(e.get("steps") or 0) for e in search)


def run_entry(r: Mapping) -> dict:
    """One run as the card lists it (a failed run keeps its error)."""
    task = r["config"]["task"]
    out = {"num_facts": int(task["num_facts"]), "seq_len": task.get("seq_len"),
           "seed": r.get("seed", r["config"]["train"].get("seed")), "lr": r.get("lr"),
           "steps": r.get("steps"), "work": work_tokens(r) if r.get("status") == "ok" else 0,
           "cpu_s": float(r.get("cpu_s") or 0.0), "wall_s": float(r.get("wall_s") or 0.0)}
    facts = guess.task_facts(task)
    if r.get("status") != "ok" or not r.get("total") or not facts:
        return {**out, "accuracy": None, "error": str(r.get("error") or "no test result")[:300]}
    g, per_seq = facts
    units = guess.units(r["total"], per_seq)
    capped = unconverged(r)
    kind, _, _ = runfit.classify(r["correct"], r["total"], units, g, capped)
    return {**out, "accuracy": r["correct"] / r["total"], "correct": int(r["correct"]),
            "total": int(r["total"]), "units": units, "guess": g, "converged": not capped,
            "kind": KINDS[int(kind)]}


def state_shape(record: Mapping) -> dict | None:
    """The state shape of a record's model: the record's own ``state_shape`` if it has one,
    else its adapter's at the record's model config; None when the adapter cannot be built
    here or its shape does not multiply to the record's state size."""
    shape = record.get("state_shape")
    if shape is None:
        shape = _adapter_shape(json.dumps(record["config"]["model"], sort_keys=True))
    state = record.get("state_size")
    if not shape or not state or math.prod(shape.values()) != state:
        return None
    return dict(shape)


@functools.lru_cache(maxsize=256)
def _adapter_shape(model_json: str) -> dict | None:
    from recallbench.api.config import ModelConfig
    from recallbench.api.errors import ConfigError
    from recallbench.api.registry import ADAPTERS

    try:
        model = json.loads(model_json)
        cls = ADAPTERS.require(model["adapter"])
        shape = cls(ModelConfig(**model)).state_shape()
    except (ConfigError, TypeError, KeyError, ValueError, ImportError):
        return None
    return {str(k): int(v) for k, v in shape.items()} if shape else None


def _cells(runs: list[dict]) -> list[dict]:
    by: dict[int, list] = {}
    for r in runs:
        by.setdefault(r["num_facts"], []).append(r)
    out = []
    for nf, rs in sorted(by.items()):
        acc = [r["accuracy"] for r in rs if r["accuracy"] is not None]
        out.append({"num_facts": nf, "seq_len": rs[0]["seq_len"], "runs": len(rs),
                    "failed": len(rs) - len(acc), "guess": 1.0 / nf,
                    "median": float(np.median(acc)) if acc else None,
                    "min": min(acc, default=None), "max": max(acc, default=None),
                    "at_guess": sum(r.get("kind") == KINDS[1] for r in rs)})
    return out


def anchored_n_eff(n50: float, d_model: int, vocab: int, family: str = "mqar") -> float:
    """N_eff whose linear reference has its 50% point at N_f = ``n50`` (inf when D ≤ s²)."""
    if n50 is None or not math.isfinite(n50):
        return math.inf if n50 else 0.0
    s2 = theory.required_inverse_sigma(0.5, vocab) ** 2
    a = theory.coefficient_a("linear", family)
    return a * s2 * n50 / (d_model - s2) if d_model > s2 else math.inf


def _law_beside(ok: list[dict], d: int, vocab: int, n50: float) -> dict:
    """The one-parameter law on the same runs, and its slope at N50 against the fitted one."""
    f = fit.fit_effective_state([r["correct"] for r in ok], [r["total"] for r in ok], d,
                                [r["num_facts"] for r in ok], vocab, guess=[r["guess"] for r in ok])
    slope = None
    if f.theta and math.isfinite(f.theta) and n50 and math.isfinite(n50):
        a = theory.coefficient_a("linear", "mqar")
        p = np.asarray(theory.recall_probability(vocab, n50 * np.exp([-0.1, 0.1]), d, f.theta, a),
                       float)
        z = special.ndtri(np.clip(p, 1e-9, 1 - 1e-9))
        slope = float(z[0] - z[1]) / 0.2
    return {"s_eff": {"value": f.state(d)[0], "ci": list(f.state(d)[1])},
            "dispersion": f.dispersion, "slope_at_n50": slope}


def build_run_card(records: Iterable[Mapping], *, delta: float = 0.01,
                   level: float = 0.95, max_spread: float | None = None) -> dict:
    """The card of ``records`` (see the module); ``max_spread``: the N50 interval's target,
    in :data:`SPREAD_RANGE` (None: :data:`MAX_SPREAD`)."""
    target = check_spread(max_spread)
    records = [r for r in records if r.get("config")]
    if not records:
        raise ValueError("a capacity card needs at least one record")
    first = next((r for r in records if r.get("status") == "ok"), records[0])
    model, task = first["config"]["model"], first["config"]["task"]
    d, vocab = int(model["d_model"]), int(task["vocab_size"])
    state, bits = first.get("state_size"), int(first.get("state_bits") or 32)
    runs = sorted((run_entry(r) for r in records),
                  key=lambda r: (r["num_facts"], r["seed"] if r["seed"] is not None else -1))
    ok = [r for r in runs if r["accuracy"] is not None]
    card: dict[str, Any] = {
        "schema": CARD_SCHEMA, "model": model,
        "task": {k: v for k, v in task.items() if k not in ("num_facts", "seq_len")},
        "state_size": state, "state_shape": state_shape(first), "state_bits": bits,
        "level": level, "runs": runs,
        "cells": _cells(runs), "work_mtok": sum(r["work"] for r in runs) / 1e6,
        "cpu_s": sum(r["cpu_s"] for r in runs), "wall_s": sum(r["wall_s"] for r in runs),
        "provenance": {k: first.get(k) for k in ("versions", "device", "adapter_source", "cpu")
                       if first.get(k) is not None}}
    if not ok:
        return plain({**card, "status": "bound", "why": "every run failed", "n50": None,
                      "s_eff": None, "ratio": None})
    if not any(r["kind"] != KINDS[1] for r in ok):
        return plain({**card, **_no_recall(ok, d, vocab, state, bits)})
    f = runfit.fit_runs([r["num_facts"] for r in ok], [r["correct"] for r in ok],
                        [r["total"] for r in ok], [r["units"] for r in ok],
                        [r["guess"] for r in ok], [not r["converged"] for r in ok], level=level)
    lo, hi = widened(f.n50, f.n50_ci)
    spread = hi / lo if lo > 0 and math.isfinite(hi) else math.inf
    crit = {"bracketed": f.bracketed, "observed": f.n_observed >= MIN_OBSERVED,
            "spread": spread <= target, "slope": f.slope <= MAX_SLOPE}
    measured = all(crit.values())
    meds = _medians(ok)
    side = None if measured else _side(meds)
    closed = _open_end(side, lo, hi, meds)
    why = None if measured else _why(crit, f, spread, ok, target)
    if closed != (lo, hi):
        why += (f"; N50 ≥ {closed[0]:g}, the largest N_f whose median run recalls at least half"
                if side == "lower" else
                f"; N50 ≤ {closed[1]:g}, the smallest N_f whose median run recalls less than half")
    lo, hi = closed
    card.update(status="measured" if measured else "bound", why=why,
                criteria={"bracketed": f.bracketed, "observed_runs": f.n_observed,
                          "spread": None if math.isinf(spread) else spread,
                          "max_spread": target, "min_observed": MIN_OBSERVED},
                fit={"slope": f.slope, "tau": f.tau, "failure_rate": f.failure_rate,
                     "threshold": f.threshold, "runs": f.n_runs, "test_sd": f.test_sd},
                simulated={**{k: list(v) for k, v in SIMULATED.items()},
                           "outside": outside_simulated(f)},
                n50={"value": f.n50, "ci": [lo, None if math.isinf(hi) else hi],
                     "bound": side, "widening": WIDEN,
                     "fit_ci": [f.n50_ci[0], None if math.isinf(f.n50_ci[1]) else f.n50_ci[1]]})
    card.update(_derived(f.n50, (lo, hi), d, vocab, state, bits))
    card["law"] = _law_beside(ok, d, vocab, f.n50)
    return plain(card)


def check_spread(max_spread: float | None, name: str = "max_spread") -> float:
    """``max_spread`` checked against :data:`SPREAD_RANGE` (None: the default target); a
    ConfigError naming ``name`` otherwise."""
    if max_spread is None:
        return MAX_SPREAD
    lo, hi = SPREAD_RANGE
    if isinstance(max_spread, bool) or not isinstance(max_spread, (int, float)) \
            or not lo <= max_spread <= hi:
        raise ConfigError(f"{name} {max_spread!r} is not allowed: the N50 interval's target "
                          f"(upper / lower), a number in [{lo:g}, {hi:g}]")
    return float(max_spread)


def outside_simulated(fit) -> list[str]:
    """The names of ``fit``'s values (slope, tau, failure_rate) outside :data:`SIMULATED`."""
    return [k for k, (lo, hi) in SIMULATED.items() if not lo <= getattr(fit, k) <= hi]


def widened(n50: float, ci: tuple[float, float], w: float = WIDEN) -> tuple[float, float]:
    """``ci`` stretched ``w``-fold about ``n50`` on the log scale (0 and ∞ stay)."""
    lo, hi = ci
    e = math.log(n50)
    return (math.exp(e - w * (e - math.log(lo))) if lo > 0 else 0.0,
            math.exp(e + w * (math.log(hi) - e)) if math.isfinite(hi) else math.inf)


def _derived(n50, ci, d, vocab, state, bits) -> dict:
    """S_eff, S_eff/S, N50 per kbit and the Fano ratio at N50, from N50 and its interval."""
    s = [2 * d * anchored_n_eff(x, d, vocab) for x in (n50, *ci)]
    out: dict[str, Any] = {"s_eff": {"value": s[0], "ci": [s[1], s[2]]}}
    if state:
        kbit = state * bits / 1000.0
        out["ratio"] = {"value": s[0] / state, "ci": [s[1] / state, s[2] / state]}
        out["n50_per_kbit"] = {"value": n50 / kbit, "ci": [ci[0] / kbit, ci[1] / kbit]}
        p50 = 0.5 + 0.5 / n50 if n50 else 1.0
        need = float(theory.fano_min_bits(n50, vocab, 1.0 - p50))
        out["fano_ratio"] = state * bits / need if need > 0 else None
    else:
        out["ratio"] = out["n50_per_kbit"] = out["fano_ratio"] = None
    return out


def _medians(ok) -> dict[int, float]:
    """Each N_f's median run, in q (the share of queries recalled above the guess)."""
    q: dict[int, list[float]] = {}
    for r in ok:
        q.setdefault(r["num_facts"], []).append((r["accuracy"] - r["guess"]) / (1 - r["guess"]))
    return {n: float(np.median(v)) for n, v in q.items()}


def _side(meds: dict[int, float]) -> str:
    """The side an unmeasured N50 is bounded on, from the cells' ``_medians``: "lower" when
    no cell's median run is below q = 1/2 (the capacity may lie beyond the cells), "upper"
    when none is above."""
    m = meds.values()
    if min(m) >= 0.5:
        return "lower"
    if max(m) < 0.5:
        return "upper"
    return "interval"


def _open_end(side, lo: float, hi: float, meds: dict[int, float]) -> tuple[float, float]:
    """A bound's interval, its open end closed by the cells where the fit leaves it open
    (runs at the ceiling carry no slope): a lower bound's end at 0 becomes the largest N_f
    whose median run recalls at least half, an upper bound's at ∞ the smallest N_f whose
    median run recalls less."""
    if side == "lower" and lo <= 0:
        lo = float(max(n for n, q in meds.items() if q >= 0.5))
    elif side == "upper" and not math.isfinite(hi):
        hi = float(min(n for n, q in meds.items() if q < 0.5))
    return lo, hi


def _why(crit, f, spread, ok, target: float) -> str:
    parts = []
    if not crit["bracketed"]:
        parts.append("no cell's median run lies on each side of q = 1/2: N50 is extrapolated")
    if not crit["observed"]:
        parts.append(f"{f.n_observed} uncensored run(s), {MIN_OBSERVED} needed")
    if not crit["spread"]:
        parts.append("the N50 interval spans a factor "
                     + ("∞" if math.isinf(spread) else f"{spread:.2f}")
                     + f" (at most {target:g})")
    if not crit["slope"]:
        parts.append(f"the fitted slope {f.slope:.2f} is steeper than {MAX_SLOPE:g}, where a steep "
                     "line's narrow interval is not shown to cover")
    return "; ".join(parts)


def _no_recall(ok, d, vocab, state, bits) -> dict:
    """No run above its guess: N50 lies below the smallest N_f measured (an upper bound);
    runs the step cap cut at the guess say only that the protocol's training found none."""
    top = min(r["num_facts"] for r in ok)
    capped = all(not r["converged"] for r in ok)
    why = ("no recall within the protocol's training: every run "
           + ("hit the step cap at the guess level" if capped else "stayed at its guess level"))
    return {"status": "no recall", "why": why,
            "n50": {"value": None, "ci": [0.0, float(top)], "bound": "upper"},
            **{k: ({"value": None, "ci": [0.0, v["ci"][1]]} if isinstance(v, dict) else v)
               for k, v in _derived(top, (top, top), d, vocab, state, bits).items()}}
