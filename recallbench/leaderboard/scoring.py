"""The scorer's view of a submission: records rebuilt from its counts, scored per budget.

A submission stores counts, not records; :func:`point_records` rebuilds the minimal
result records the scorer needs, :func:`score_records` scores them with the suite's
``scoring`` settings, and :func:`budget_scores` picks each budget's entry (mean over
seeds and best of seeds: S_eff, capacity N_f*, Fano ratio; docs/theory.md, 'The law').
Building a submission stores these scores; validation recomputes and compares them.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

from recallbench.api.canonical import plain
from recallbench.leaderboard.points import merge_config
from recallbench.leaderboard.suite import Suite

SCORE_KEYS = ("s_eff", "s_eff_ci", "n_eff", "ratio", "capacity", "fano_min_bits",
              "state_bits_total", "bits_ratio")


def rounded(x: Any, digits: int = 6) -> Any:
    """:func:`plain` data with every float to ``digits`` significant digits (non-finite: None)."""
    return _round_floats(plain(x), digits)


def _round_floats(x: Any, digits: int) -> Any:
    if isinstance(x, float):
        return float(f"{x:.{digits}g}")
    if isinstance(x, list):
        return [_round_floats(v, digits) for v in x]
    if isinstance(x, dict):
        return {k: _round_floats(v, digits) for k, v in x.items()}
    return x


def point_records(submission: Mapping) -> list[dict]:
    """Minimal result records rebuilt from a submission's counts (for the scorer)."""
    from recallbench.law.scorer import SCHEMA

    out = []
    for b in submission["budgets"]:
        for p in b["points"]:
            cfg = merge_config(b["config"], p.get("delta") or {})
            acc = p["correct"] / p["total"] if p["total"] else 0.0
            out.append({"schema": SCHEMA, "status": "ok", "error": None, "accuracy": acc,
                        "accuracy_topk": (p["correct_topk"] / p["total"]) if p["total"] else 0.0,
                        "top_k": cfg["train"].get("top_k"), "correct": p["correct"],
                        "correct_topk": p["correct_topk"], "total": p["total"],
                        "converged": p.get("converged"), "steps": p.get("steps"),
                        "state_size": b["state_size"], "state_bits": b["state_bits"],
                        "info_bits": p["info_bits"], "seed": p["seed"], "config": cfg,
                        "config_hash": p["config_hash"], "lr": p.get("lr"),
                        "extended": p.get("extended"), "cpu_s": p.get("cpu_s"),
                        "wall_s": p.get("wall_s"),
                        # the scorer judges convergence only where the run did (stop_reason)
                        **({"stop_reason": p["stop_reason"]} if p.get("stop_reason") else {})})
    return out


def score_records(records: list[Mapping], suite: Suite) -> dict:
    """The scorer's report of ``records`` under the suite's scoring settings (no collapse)."""
    from recallbench.law.scorer import score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # a suite that does not set scoring.guess predates the guess level: its submissions
        # were stored with the law alone, and verify only under it
        return score(records, collapse=False, **{"guess": False, **suite.scoring})


def scoring_entry(suite: Suite) -> dict:
    """A submission's ``scoring`` field: the suite's settings and the views it reports."""
    return {**suite.scoring, "view": "mean", "views": {
        "mean": "mean over seeds (counts pooled)", "best": "best of seeds (paper convention)"}}


def config_entry(report: Mapping, model: Mapping) -> tuple[dict | None, dict | None]:
    """The scorer's per-configuration entry of one model config (D, N, Λ), and its group."""
    key = (model.get("d_model"), model.get("d_state"), model.get("n_layers", 1))
    for g in report.get("groups", []):
        for entry in g.get("configs", []):
            if (entry.get("d_model"), entry.get("d_state"), entry.get("n_layers")) == key:
                return entry, g
    return None, None


def budget_scores(report: Mapping, budget_model: Mapping) -> dict:
    """The scorer's per-configuration entry matching a budget (one group expected)."""
    entry, _ = config_entry(report, budget_model)
    if entry is None:
        return {"mean": {"error": "no score"}, "best": {"error": "no score"}}
    out = {}
    for view in ("mean", "best"):
        e = entry.get(view) or {}
        if "error" in e:
            out[view] = {"error": e["error"]}
        elif e.get("no_recall"):  # no cell above the guess: S_eff 0 with the bound it leaves
            out[view] = {**dict.fromkeys(SCORE_KEYS), "s_eff": 0.0,
                         "s_eff_ci": [0.0, e.get("s_eff_upper")]}
        else:
            out[view] = {k: e.get(k) for k in SCORE_KEYS}
    return out
