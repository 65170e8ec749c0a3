"""The scorer's view of a submission: records rebuilt from its counts, scored per budget.

A submission stores counts, not records; ``points.point_records`` rebuilds the minimal
result records the scorer needs, :func:`score_records` scores them with the suite's
``scoring`` settings, and :func:`budget_scores` picks each budget's entry (mean over
seeds and best of seeds: S_eff, capacity N_f*, Fano ratio; docs/theory.md, 'The law').
Building a submission stores these scores; validation recomputes and compares them.
"""
from __future__ import annotations

import warnings
from typing import Mapping

from recallbench.leaderboard.suite import Suite

SCORE_KEYS = ("s_eff", "s_eff_ci", "n_eff", "ratio", "capacity", "fano_min_bits",
              "state_bits_total", "bits_ratio")


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
