"""The capacity card: one model at one state budget, measured over N_f (docs/capacity.md).

    card = build_card(records, delta=0.01)        # JSON-ready dict, schema recallbench.card/1
    card["status"]       # "measured", "bound" or "no recall"
    card["s_eff"]        # {"value", "ci", "bound"}: bound is None, "lower" or "upper"

``records`` are result records of one model configuration (D, N, Λ, options) on one task
family (MQAR, L = 4·N_f, one V), any number of N_f and seeds.  Per N_f, a **cell**: its
best-of-seeds run (the paper's convention) beside its optimisation failures, seeds that
stayed at the guess level while another seed of the cell learned (``law.guess``).  The
effective state is the guess-aware fit (``fit.fit_effective_state`` with the guess) on the
cells that show recall and converged; a cell the step cap cut while improving is a lower
bound and stays out.  The card is **measured** when :func:`criteria` hold:

* at least :data:`MIN_MID` converged cells strictly between the guess level and
  :data:`CEILING` (and above the guess at 95%), at least one on each side of p = 0.5;
* the S_eff interval within a factor :data:`MAX_SPREAD` (upper / lower).

Otherwise it is a **bound** and says why; a model with no cell above its guess gets "no
recall" with an upper bound.  N_f* at p = 0.5 and at 1 − δ come from the fitted law at the
card's V, each with the interval of the fitted N_eff.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from recallbench.api.canonical import plain
from recallbench.law import declared, fit, guess, theory
from recallbench.law.cells import best_run, unconverged

CARD_SCHEMA = "recallbench.card/1"
MIN_MID = 3  # converged cells strictly between the guess level and the ceiling
CEILING = 0.95  # above this a cell says little about the state (a lower bound of it)
MAX_SPREAD = 1.5  # S_eff interval: upper / lower at most this


def _acc(r: Mapping) -> float:
    return r["correct"] / r["total"] if r.get("total") else 0.0


def cell_entry(runs: list[Mapping], level: float = 0.95) -> dict:
    """One N_f: best of seeds, its interval and guess, the seeds' recall and failures."""
    ok = [r for r in runs if r.get("status") == "ok" and r.get("total")]
    first = (ok or runs)[0]
    task = first["config"]["task"]
    facts = guess.task_facts(task)
    g = facts[0] if facts else None
    cell: dict[str, Any] = {"num_facts": task["num_facts"], "seq_len": task.get("seq_len"),
                            "vocab_size": task["vocab_size"], "guess": g,
                            "seeds": len(runs), "failed_runs": len(runs) - len(ok)}
    if not ok:
        return {**cell, "accuracy": None, "recall": False, "converged": False}
    best = best_run(ok)
    recall, lower, units = (guess.judge(best["correct"], best["total"], facts, level, len(ok))
                            if facts else (True, None, best["total"]))
    seed_recall = [guess.judge(r["correct"], r["total"], facts, level)[0] if facts else True
                   for r in ok]
    failures = sum(not s for s in seed_recall) if any(seed_recall) else 0
    lo, hi = fit.binomial_interval(best["correct"], best["total"], level)
    acc = _acc(best)
    converged = not unconverged(best)
    return {**cell, "accuracy": acc, "ci": [float(lo), float(hi)], "correct": best["correct"],
            "total": best["total"], "units": units, "recall": recall, "recall_lower": lower,
            "converged": converged, "stop_reason": best.get("stop_reason"),
            "extended": int(best.get("extended") or 0), "steps": best.get("steps"),
            "lr": best.get("lr", best["config"]["train"].get("lr")), "seed": best.get("seed"),
            "optimisation_failures": failures,
            "mid": bool(recall and converged and acc < CEILING),
            "cpu_s": sum(float(r.get("cpu_s") or 0) for r in runs),
            "wall_s": sum(float(r.get("wall_s") or 0) for r in runs)}


def criteria(cells: list[dict], s_eff_ci) -> dict:
    """The stopping rule's parts, each with whether it holds."""
    mid = [c for c in cells if c.get("mid")]
    above = sum(c["accuracy"] >= 0.5 for c in mid)
    lo, hi = s_eff_ci or (0.0, math.inf)
    spread = hi / lo if lo and lo > 0 and hi is not None and math.isfinite(hi) else math.inf
    out = {"mid_cells": {"value": len(mid), "need": MIN_MID, "ok": len(mid) >= MIN_MID},
           "above_half": {"value": above, "need": 1, "ok": above >= 1},
           "below_half": {"value": len(mid) - above, "need": 1, "ok": len(mid) - above >= 1},
           "spread": {"value": spread, "need": MAX_SPREAD, "ok": spread <= MAX_SPREAD}}
    out["all"] = all(v["ok"] for v in out.values())
    return out


def why_not(crit: Mapping) -> str:
    """Which parts of :func:`criteria` fail, in words."""
    parts = []
    if not crit["mid_cells"]["ok"]:
        parts.append(f"{crit['mid_cells']['value']} converged cell(s) between the guess level "
                     f"and {CEILING}, {MIN_MID} needed")
    for side, words in (("above_half", "at or above p = 0.5"), ("below_half", "below p = 0.5")):
        if not crit[side]["ok"]:
            parts.append(f"no such cell {words}")
    if not crit["spread"]["ok"]:
        v = crit["spread"]["value"]
        parts.append(f"the S_eff interval spans a factor {'∞' if math.isinf(v) else f'{v:.2f}'}"
                     f" (at most {MAX_SPREAD})")
    return "; ".join(parts)


def _capacities(d: int, n_eff: float, ci, vocab: int, family: str, delta: float, form: str,
                state: int | None, bits: int) -> dict:
    a = theory.coefficient_a("linear", family)

    def cap(n, dl):
        if n is None or n == 0:
            return 0.0
        if math.isinf(n):
            return math.inf
        return max(0.0, float(theory.capacity(d, n, vocab, a, dl, form)))

    lo, hi = ci
    out = {}
    for key, dl in (("p50", 0.5), ("p1_delta", delta)):
        out[key] = {"value": cap(n_eff, dl), "ci": [cap(lo, dl), cap(hi, dl)],
                    "p": 1 - dl}
    rep = fit.capacity_report(d, n_eff, vocab, family, state, bits, delta, form)
    kbits = state * bits / 1000.0 if state else None
    c, h = out["p1_delta"], out["p50"]
    out["per_kbit"] = ({"value": c["value"] / kbits, "ci": [x / kbits for x in c["ci"]]}
                       if kbits else None)
    # N_f* at p = 0.5 per kbit: what a board ranks by (N_f*(δ) is 0 for a small state
    # that never reaches 1 − δ, so it cannot order those)
    out["p50_per_kbit"] = ({"value": h["value"] / kbits, "ci": [x / kbits for x in h["ci"]]}
                           if kbits else None)
    out["fano_min_bits"] = rep.fano_min_bits
    out["fano_ratio"] = rep.bits_ratio
    return out


def build_card(records: Iterable[Mapping], *, delta: float = 0.01, level: float = 0.95,
               form: str = "eq19") -> dict:
    """The card of ``records`` (one model configuration, one task family): see the module."""
    records = [r for r in records if r.get("config")]
    if not records:
        raise ValueError("a capacity card needs at least one record")
    first = records[0]
    model, task = first["config"]["model"], first["config"]["task"]
    family = declared.task_family(task.get("name")) or "mqar"
    d = int(model["d_model"])
    ok_first = next((r for r in records if r.get("status") == "ok"), first)
    state, bits = ok_first.get("state_size"), int(ok_first.get("state_bits") or 32)
    by_nf: dict[int, list] = {}
    for r in records:
        by_nf.setdefault(int(r["config"]["task"]["num_facts"]), []).append(r)
    cells = [cell_entry(runs, level) for _, runs in sorted(by_nf.items())]
    n_runs = sum(c["seeds"] for c in cells)
    fails = sum(c.get("optimisation_failures", 0) for c in cells)
    card: dict[str, Any] = {
        "schema": CARD_SCHEMA, "model": model, "task": {k: v for k, v in task.items()
                                                         if k not in ("num_facts", "seq_len")},
        "family": family, "state_size": state, "state_bits": bits, "delta": delta,
        "level": level, "form": form, "cells": cells,
        "optimisation_failures": {"count": fails, "runs": n_runs,
                                  "rate": fails / n_runs if n_runs else 0.0},
        "cpu_s": sum(c.get("cpu_s", 0.0) for c in cells),
        "wall_s": sum(c.get("wall_s", 0.0) for c in cells),
        "provenance": {k: ok_first.get(k) for k in ("versions", "device", "adapter_source")
                       if ok_first.get(k) is not None},
    }
    fitted = [c for c in cells if c.get("recall") and c.get("converged")
              and c.get("accuracy") is not None]
    vocab = max(c["vocab_size"] for c in cells)
    if not fitted:
        return plain({**card, **_no_fit(cells, d, state, family, form, level, vocab, delta)})
    f = fit.fit_effective_state([c["correct"] for c in fitted], [c["total"] for c in fitted], d,
                                [c["num_facts"] for c in fitted],
                                [c["vocab_size"] for c in fitted], family=family, form=form,
                                level=level, guess=[c["guess"] or 0.0 for c in fitted])
    s_eff, s_ci = f.state(d)
    crit = criteria(cells, s_ci)
    card.update(
        status="measured" if crit["all"] else "bound", criteria=crit,
        why=None if crit["all"] else why_not(crit),
        s_eff={"value": s_eff, "ci": list(s_ci), "bound": None},
        n_eff={"value": f.theta, "ci": list(f.theta_ci)}, guess_share=f.guess_share,
        dispersion=f.dispersion, fitted_cells=[c["num_facts"] for c in fitted],
        ratio=({"value": s_eff / state, "ci": [x / state for x in s_ci]} if state else None),
        capacity=_capacities(d, f.theta, f.theta_ci, vocab, family, delta, form, state, bits))
    if not crit["all"]:
        card["s_eff"]["bound"] = _bound_side(cells)
    return plain(card)


def _bound_side(cells: list[dict]) -> str | None:
    """Which side an unmeasured card's S_eff is bounded on: "lower" when its largest N_f
    is at the ceiling or cut by the cap (more state could hide there), "upper" when every
    informative cell is at or near the guess; None when neither can be said."""
    measured = [c for c in cells if c.get("accuracy") is not None]
    if not measured:
        return None
    top = max(measured, key=lambda c: c["num_facts"])
    if top["accuracy"] >= CEILING or not top["converged"]:
        return "lower"
    if not any(c.get("mid") for c in measured):
        return "upper"
    return None


def _no_fit(cells, d, state, family, form, level, vocab, delta) -> dict:
    """No converged cell above the guess: "no recall" with an upper bound, or a bound when
    the cells above the guess were all cut by the cap."""
    usable = [c for c in cells if c.get("accuracy") is not None]
    cut = [c for c in usable if c.get("recall") and not c.get("converged")]
    if cut:
        return {"status": "bound", "why": "every cell above the guess level was cut by the "
                "step cap while improving", "s_eff": {"value": None, "ci": None,
                                                      "bound": "lower"},
                "criteria": criteria(cells, None)}
    if not usable:
        return {"status": "bound", "why": "every run failed", "s_eff": {"value": None,
                                                                          "ci": None,
                                                                          "bound": None}}
    hi = guess.no_recall_bound([c["correct"] for c in usable], [c["total"] for c in usable],
                               [c["units"] for c in usable], [c["guess"] or 0 for c in usable], d,
                               [c["num_facts"] for c in usable],
                               [c["vocab_size"] for c in usable], family=family, form=form,
                               level=level) * 2.0 * d
    return {"status": "no recall", "why": "no cell is above its guess level at 95%",
            "s_eff": {"value": 0.0, "ci": [0.0, hi], "bound": "upper"},
            "ratio": {"value": 0.0, "ci": [0.0, hi / state]} if state else None,
            "criteria": criteria(cells, None)}
