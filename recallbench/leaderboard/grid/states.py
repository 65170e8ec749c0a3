"""The effective-state table of a grid suite (``leaderboard states``): each submission's
counts scored with the law's scorer (``scoring``), per budget and pooled.

* per submission and budget: the state S, the bits per scalar b, the fitted effective state
  S_eff, S_eff/S, the capacity N_f*(δ) and the capacity per bit N_f*/(b·S), each with its
  interval, and the unconverged points; per submission the pooled S_eff/S over all budgets
  (the scorer's ``efficiency``) with its interval (:func:`state_rows`);
* the README's rows sorted by pooled S_eff/S and a verdict paragraph generated from the
  numbers: which models come closest to the Fano bound, which waste their state, and which
  rankings the intervals leave unresolved (:func:`render_readme`);
* the pooled S_eff/S per model with its interval, log scale (:func:`states_figure`).

The capacity interval is the scorer's own capacity (``fit.capacity_report``) at the ends
of the fitted N_eff interval (N_f* grows with N_eff).  A model whose state grows with L
(attention: S null) gets S_eff and N_f* but no ratio, as in the scorer's report.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from recallbench.api.canonical import plain
from recallbench.leaderboard.grid.scoring import config_entry, score_records
from recallbench.leaderboard.grid.table import fmt, unconverged_by_nf
from recallbench.leaderboard.points import point_records
from recallbench.leaderboard.states import STATES_PNG
from recallbench.leaderboard.suite import Suite


NO_STATE_NOTE = ("Models whose state grows with L (attention) have no fixed S: they get "
                 "S_eff but no S_eff/S and no capacity per bit, and are listed last.")


def _bounds(ci) -> tuple[float, float]:
    """A report interval as numbers: a null bound is unbounded (0 below, infinity above)."""
    lo, hi = (list(ci) + [None, None])[:2] if ci else (None, None)
    return (0.0 if lo is None else float(lo)), (math.inf if hi is None else float(hi))


def _config_entry(report: Mapping, model: Mapping) -> tuple[dict | None, str | None]:
    """The scorer's entry of one model configuration (D, N, Λ), and the task's law family."""
    from recallbench.law import declared

    entry, group = config_entry(report, model)
    if entry is None:
        return None, None
    return entry, declared.task_family(group["task"].get("name", "mqar"))


def _capacity_ci(budget: Mapping, e: Mapping, family: str, suite: Suite) -> list[float]:
    """N_f*(δ) at the ends of the N_eff interval, by the scorer's own capacity function."""
    from recallbench.law import fit

    m, sc = budget["config"]["model"], suite.scoring
    return [fit.capacity_report(m["d_model"], n, budget["config"]["task"]["vocab_size"], family,
                                budget["state_size"], budget["state_bits"], sc["delta"],
                                sc["form"]).capacity for n in _bounds(e.get("n_eff_ci"))]


def budget_state(report: Mapping, budget: Mapping, suite: Suite, view: str) -> dict:
    """One budget of one submission: S, b, S_eff, S_eff/S, N_f*, N_f*/(b·S), with intervals."""
    S, bits = budget["state_size"], budget["state_bits"]
    out: dict[str, Any] = {"budget": budget["name"], "state_size": S, "state_bits": bits,
                           "unconverged": sum(unconverged_by_nf(budget).values())}
    keys = ("s_eff", "s_eff_ci", "ratio", "ratio_ci", "n_eff", "n_eff_ci", "capacity",
            "capacity_ci", "per_bit", "per_bit_ci")
    out.update(dict.fromkeys(keys))
    entry, family = _config_entry(report, budget["config"]["model"])
    e = (entry or {}).get(view) or {"error": "no score"}
    if "error" in e:
        return {**out, "error": e["error"]}
    if e.get("no_recall"):  # no cell above its guess level: S_eff 0 and the bound left
        return {**out, "s_eff": 0.0, "s_eff_ci": [0.0, e.get("s_eff_upper")],
                "note": "no recall beyond guessing"}
    cap_ci = _capacity_ci(budget, e, family, suite)
    out.update(s_eff=e["s_eff"], s_eff_ci=e["s_eff_ci"], ratio=e.get("ratio"),
               ratio_ci=e.get("ratio_ci"), n_eff=e["n_eff"], n_eff_ci=e["n_eff_ci"],
               capacity=e["capacity"], capacity_ci=cap_ci)
    if S:  # a fixed state: capacity per state bit
        out.update(per_bit=e["capacity"] / (bits * S), per_bit_ci=[c / (bits * S) for c in cap_ci])
    return out


def _largest(suite: Suite) -> str:
    """The suite's largest budget: the most D·N·Λ (the last one on a tie)."""
    size = {b["name"]: b["model"]["d_model"] * b["model"]["d_state"] * b["model"].get("n_layers", 1)
            for b in suite.budgets}
    return max(reversed(list(size)), key=size.__getitem__)


def submission_states(suite: Suite, path: Path, sub: Mapping, view: str) -> dict:
    """A submission's row: its model, every budget's state, and the pooled S_eff/S."""
    report = score_records(point_records(sub), suite)
    group = (report.get("groups") or [{}])[0]
    eff = (group.get("efficiency") or {}).get(view) or {}
    model = sub["model"]
    prov = model.get("provenance") or {}
    fixed = all(b["state_size"] is not None for b in sub["budgets"])
    return plain({
        "file": path.name, "model": model["name"], "adapter": model["adapter"],
        "sha256": sub["sha256"][:12],
        "provenance": {k: prov.get(k) for k in ("distribution", "version", "library",
                                                "library_version")}
                      | {"source_sha256": (prov.get("source_sha256") or "")[:12] or None},
        "state": "fixed" if fixed else "grows with L",
        "budgets": [budget_state(report, b, suite, view) for b in sub["budgets"]],
        "pooled": ({"ratio": eff["ratio"], "ratio_ci": eff["ratio_ci"]} if "ratio" in eff else
                   {"ratio": None, "ratio_ci": None,
                    "note": eff.get("error") or (
                        f"no recall beyond guessing (S_eff/S <= {eff['ratio_upper']:.3g})"
                        if eff.get("no_recall") else
                        "no fixed state S: no ratio" if not fixed else "no pooled fit")}),
        "largest_budget": _largest(suite),
    })


def state_rows(suite: Suite, subs: list[tuple[Path, Mapping]], view: str = "mean") -> list[dict]:
    """One row per submission, the largest pooled S_eff/S first (none last), then by name."""
    rows = [submission_states(suite, path, sub, view) for path, sub in subs]
    rows.sort(key=lambda r: (r["pooled"]["ratio"] is None, -(r["pooled"]["ratio"] or 0.0),
                             r["model"].casefold()))
    return rows


def overlap(a, b) -> bool:
    """Whether two intervals (null bounds unbounded) share a point."""
    (alo, ahi), (blo, bhi) = _bounds(a), _bounds(b)
    return alo <= bhi and blo <= ahi


def interval_text(x, ci, spec: str = ".3g") -> str:
    """``x [lo, hi]`` ("–" when x is missing, "∞" for an unbounded upper end)."""
    if x is None:
        return "–"
    lo, hi = _bounds(ci)
    return f"{fmt(x, spec)} [{fmt(lo, spec)}, {fmt(hi, spec)}]"


def _named(rows: list[dict]) -> str:
    return ", ".join(f"{r['model']} ({interval_text(r['pooled']['ratio'], r['pooled']['ratio_ci'])})"
                     for r in rows)


def _extreme(what: str, row: dict, others: list[dict], pct: str, alone: str) -> str:
    """One sentence on the top or bottom model: its interval, and who it is not resolved from."""
    tied = [r for r in others if overlap(r["pooled"]["ratio_ci"], row["pooled"]["ratio_ci"])]
    tail = f"not resolved at {pct} from {_named(tied)}" if tied else f"{alone} at {pct}"
    return f"{what}: {_named([row])}, {tail}."


def _ranking(ranked: list[dict], pct: str) -> list[str]:
    """The verdict on two or more ranked models: the top, the bottom, the open neighbours."""
    open_pairs = [f"{a['model']} vs {b['model']}" for a, b in zip(ranked, ranked[1:])
                  if overlap(a["pooled"]["ratio_ci"], b["pooled"]["ratio_ci"])]
    return [_extreme("Closest to the Fano bound (the largest pooled S_eff/S, the fewest state "
                     "bits wasted)", ranked[0], ranked[1:], pct, "ahead of every other model"),
            _extreme("Wastes the most of its state (the smallest pooled S_eff/S)", ranked[-1],
                     ranked[:-1], pct, "below every other model"),
            f"Rankings not resolved (overlapping {pct} intervals of neighbours): "
            f"{'; '.join(open_pairs)}." if open_pairs else
            f"Every neighbouring pair in the ranking is resolved at {pct} (no overlap)."]


def verdict(rows: list[dict], level: float) -> str:
    """The verdict paragraph, generated from the rows (sorted, best first)."""
    ranked = [r for r in rows if r["pooled"]["ratio"] is not None]
    pct = f"{level * 100:g}%"
    if not ranked:
        out = ["No submission has a pooled S_eff/S, so none can be compared with the Fano bound."]
    elif len(ranked) == 1:
        out = [f"Only {_named(ranked)} has a pooled S_eff/S; there is nothing to rank it against."]
    else:
        out = _ranking(ranked, pct)
    unranked = [r["model"] for r in rows if r["pooled"]["ratio"] is None]
    if unranked:
        out.append(f"Without a pooled S_eff/S (no fixed state, or no fit): {', '.join(unranked)}.")
    return " ".join(out)


def _row_cells(r: dict, names: list[str]) -> list[str]:
    """A README row: model, adapter, S and S_eff per budget, pooled ratio, N_f* per kbit."""
    by = {b["budget"]: b for b in r["budgets"]}  # a valid submission has every budget
    s = ["grows with L" if by[n]["state_size"] is None else str(by[n]["state_size"]) for n in names]
    s_eff = [interval_text(by[n]["s_eff"], by[n]["s_eff_ci"], ".4g") for n in names]
    big = by[r["largest_budget"]]
    kbit = [None if x is None else x * 1e3 for x in [big["per_bit"], *(big["per_bit_ci"] or [0, None])]]
    return [r["model"], r["adapter"], *s, *s_eff,
            interval_text(r["pooled"]["ratio"], r["pooled"]["ratio_ci"]),
            interval_text(kbit[0], kbit[1:]), str(sum(b["unconverged"] for b in r["budgets"]))]


def render_readme(suite: Suite, rows: list[dict], view: str, command: str) -> str:
    """The table's README.md: header, table, notes and the verdict."""
    sc = suite.scoring
    names = [b["name"] for b in suite.budgets]
    head = (["model", "adapter"] + [f"S {n}" for n in names] + [f"S_eff {n}" for n in names]
            + ["pooled S_eff/S", f"N_f* per kbit ({_largest(suite)})", "unconverged points"])
    lines = [f"# Effective state: {suite.data.get('title') or suite.name}", "",
             f"Suite `{suite.name}`, view **{view}** ({'mean over seeds' if view == 'mean' else 'best of seeds'}), "
             f"δ = {sc['delta']}, {sc['level'] * 100:g}% intervals, law {sc['form']}; generated by "
             f"`{command}` (do not edit by hand).", "",
             "| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    lines += ["| " + " | ".join(_row_cells(r, names)) + " |" for r in rows]
    lines += ["", "S: state scalars per sequence; S_eff: the state of the simplified linear Mamba "
              "that the recall law says reproduces the measured accuracies, with its interval; "
              "pooled S_eff/S: one fit over all budgets. N_f* per kbit: the capacity N_f*(δ) per "
              "1000 bits of state (b·S), at the ends of the N_eff interval. Unconverged points "
              "stopped at max_steps while still improving (a cell whose best seed did so is left "
              "out of the fits).", "", NO_STATE_NOTE, "", "## Verdict", "",
              verdict(rows, sc["level"]), "", f"![pooled S_eff/S per model]({STATES_PNG})", ""]
    return "\n".join(lines)


def states_figure(rows: list[dict], path: Path, title: str) -> Path:
    """Pooled S_eff/S per model with its interval, sorted, on a log axis (no pyplot)."""
    from matplotlib.figure import Figure

    ranked = [r for r in rows if r["pooled"]["ratio"] is not None and r["pooled"]["ratio"] > 0]
    fig = Figure(figsize=(max(4.0, 0.7 * len(ranked) + 2), 4), dpi=120)
    ax = fig.subplots()
    if ranked:
        y = [r["pooled"]["ratio"] for r in ranked]
        ci = [_bounds(r["pooled"]["ratio_ci"]) for r in ranked]
        finite = [v for lo, hi in ci for v in (lo, hi) if 0 < v < math.inf] + y
        bottom, top = min(finite) / 2, max(finite) * 2
        err = [[v - max(lo, bottom) for v, (lo, _) in zip(y, ci)],
               [min(hi, top) - v for v, (_, hi) in zip(y, ci)]]
        ax.errorbar(range(len(y)), y, yerr=err, fmt="o", capsize=4)
        ax.set_yscale("log")
        ax.set_ylim(bottom, top)
        ax.set_xlim(-0.5, len(y) - 0.5)
        ax.set_xticks(range(len(y)), [r["model"] for r in ranked], rotation=30, ha="right")
    else:
        ax.text(0.5, 0.5, "no model with a pooled S_eff/S", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_ylabel("pooled S_eff / S")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    return path
