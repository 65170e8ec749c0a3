"""The ranked table of a suite, shared by its README.md (``render``) and its page (``page``).

Rows are ranked by recall capacity per state bit, N_f* / (b·S) (docs/theory.md, 'The
law'); models without a finite state S come last.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from recallbench.leaderboard.suite import Suite

PLOT = "accuracy_vs_state.png"

RANKING_NOTE = (
    "Ranked by **recall capacity per state bit**, N_f* / (b·S): how many facts the model "
    "recalls with probability ≥ 1 − δ per bit of recurrent state (shown per 1000 bits). S is the number of state "
    "scalars per sequence, b the bits per scalar; S_eff is the state of the simplified linear "
    "Mamba that the recall law says reproduces the measured accuracies. "
    "The Fano ratio is b·S divided by the Fano minimum (1 − δ)·N_f*·log2(V/2) − 1 "
    "(Lem 4.5): how many times more bits the state holds than the demonstrated recall needs "
    "(below 1 would contradict the bound). N_f* comes from the fitted law (continuous; it may "
    "lie below the smallest N_f measured when no point reaches 1 − δ). `acc N_f=k`: top-1 "
    "test accuracy, mean over seeds at the better learning rate. Models whose state grows "
    "with L (attention) have no S and are listed last.")


def lr_means(budget: Mapping) -> dict[int, dict[float | str, float]]:
    """Per N_f, the mean accuracy over seeds at each learning rate of an lr grid, or under
    ``"search"`` for runs that each chose their lr by validation (``lr_search``)."""
    by: dict[int, dict[float | str, list[float]]] = {}
    for p in budget["points"]:
        lr = "search" if p.get("lr_search") else float(p["lr"])
        by.setdefault(p["num_facts"], {}).setdefault(lr, []).append(p["correct"] / p["total"])
    return {nf: {lr: sum(v) / len(v) for lr, v in lrs.items()} for nf, lrs in by.items()}


def acc_by_nf(budget: Mapping) -> dict[int, float]:
    """Mean over seeds of the best learning rate's accuracy, per N_f."""
    return {nf: max(means.values()) for nf, means in lr_means(budget).items()}


def unconverged_by_nf(budget: Mapping) -> dict[int, int]:
    """Per N_f, the runs cut by max_steps while still improving (their accuracy is a lower
    bound; the scorer's rule: a run that judged its convergence and did not converge)."""
    out: dict[int, int] = {}
    for p in budget["points"]:
        if p.get("stop_reason") and p.get("converged") is False:
            out[p["num_facts"]] = out.get(p["num_facts"], 0) + 1
    return out


UNCONVERGED_NOTE = (
    "† after an accuracy: at least one seed stopped at max_steps while still improving, so "
    "the accuracy is a lower bound, not the layer's capacity; a cell whose best seed did so "
    "is left out of the S_eff and N_f* fit.")


def fmt(x: Any, spec: str = ".3g") -> str:
    """A table cell: "–" for missing, "∞" for infinity, else ``format(x, spec)``."""
    if x is None:
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return format(x, spec)


def leaderboard_rows(suite: Suite, subs: list[tuple[Path, Mapping]]) -> list[dict]:
    """One row per (submission, budget), best capacity per state bit first."""
    rows = []
    for path, sub in subs:
        for b in sub["budgets"]:
            sc = (b.get("score") or {}).get("mean") or {}
            S, bits = b["state_size"], b["state_bits"]
            cap = sc.get("capacity")
            per_bit = (cap / (bits * S)) if (cap is not None and S) else None
            rows.append({"file": path.name, "model": sub["model"]["name"], "adapter": sub["model"]["adapter"],
                         "library": sub["model"].get("library") or {}, "budget": b["name"],
                         "state_size": S, "state_bits": bits, "state_note": b.get("state_note"),
                         "s_eff": sc.get("s_eff"), "ratio": sc.get("ratio"), "capacity": cap,
                         "bits_ratio": sc.get("bits_ratio"), "per_bit": per_bit,
                         "acc": acc_by_nf(b), "unconverged": unconverged_by_nf(b),
                         "sha": sub["sha256"][:12]})
    rows.sort(key=lambda r: (r["per_bit"] is None, -(r["per_bit"] or 0), -(r["capacity"] or 0),
                             r["model"], r["budget"]))
    return rows


def table(suite: Suite, rows: list[dict]
          ) -> tuple[list[tuple[str, str]], list[list[tuple[str, Any]]]]:
    """The ranked table: its columns as (key, header), and per row each cell's text and
    its value for sorting (a number, or None where the column is text or the value missing)."""
    nfs = suite.num_facts
    head = [("rank", "#"), ("model", "model"), ("adapter", "adapter"), ("budget", "budget"),
            ("state", "state S (scalars)"), ("s_eff", "S_eff"), ("s_eff_ratio", "S_eff/S"),
            ("capacity", "N_f*"), ("per_kbit", "N_f* per kbit"), ("fano_ratio", "Fano ratio")]
    head += [(f"acc_{nf}", f"acc N_f={nf}") for nf in nfs]
    body = []
    for i, r in enumerate(rows, 1):
        state = str(r["state_size"]) if r["state_size"] is not None else "grows with L"
        per_kbit = None if r["per_bit"] is None else r["per_bit"] * 1e3
        cells = [(str(i), i), (r["model"], None), (r["adapter"], None), (r["budget"], None),
                 (state, r["state_size"]), (fmt(r["s_eff"], ".4g"), r["s_eff"]),
                 (fmt(r["ratio"], ".3f"), r["ratio"]), (fmt(r["capacity"], ".3g"), r["capacity"]),
                 (fmt(per_kbit, ".3f"), per_kbit), (fmt(r["bits_ratio"], ".3g"), r["bits_ratio"])]
        cells += [(fmt(r["acc"].get(nf), ".3f") + ("†" if r["unconverged"].get(nf) else ""),
                   r["acc"].get(nf)) for nf in nfs]
        body.append(cells)
    return head, body
