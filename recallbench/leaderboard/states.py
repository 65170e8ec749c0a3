"""The effective-state table of a suite: how much of its state each model uses, across models.

:func:`write_states` validates every submission of a suite as ``render`` does (nothing
invalid is shown), scores each one's counts with the law's scorer (``scoring``) and
writes, into an output folder:

* ``states.json``: per submission and budget, the state S, the bits per scalar b, the
  fitted effective state S_eff, S_eff/S, the capacity N_f*(δ) and the capacity per bit
  N_f*/(b·S), each with its interval, and the unconverged points; per submission the
  pooled S_eff/S over all budgets (the scorer's ``efficiency``) with its interval;
* ``README.md``: one row per submission, sorted by pooled S_eff/S, and a verdict
  paragraph generated from the numbers: which models come closest to the Fano bound,
  which waste their state, and which rankings the intervals leave unresolved;
* ``states.png``: the pooled S_eff/S per model with its interval, log scale.

The capacity interval is the scorer's own capacity (``fit.capacity_report``) at the ends
of the fitted N_eff interval (N_f* grows with N_eff).  A model whose state grows with L
(attention: S null) gets S_eff and N_f* but no ratio, as in the scorer's report.  A
capacity suite's table comes from its cards instead (``capacity_board.state_rows``: S,
S_eff and S_eff/S per budget, measured or a bound; the figure :func:`cards_figure`).
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from recallbench.api.canonical import plain
from recallbench.api.errors import ConfigError
from recallbench.leaderboard import capacity_board
from recallbench.leaderboard.board import valid_board
from recallbench.leaderboard.scoring import config_entry, point_records, score_records
from recallbench.leaderboard.suite import SUBMISSIONS_DIR, Suite, load_suite
from recallbench.leaderboard.table import fmt, unconverged_by_nf

SCHEMA = "recallbench.states/1"
STATES_JSON = "states.json"
STATES_MD = "README.md"
STATES_PNG = "states.png"
VIEWS = ("mean", "best")
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


def cards_figure(suite: Suite, rows: list[dict], path: Path) -> Path:
    """A capacity suite's S_eff/S per budget and model (``capacity_board.state_rows``):
    measured with its interval; a bound as an open triangle with an arrow, never a point."""
    from matplotlib.figure import Figure

    names = [b["name"] for b in suite.budgets]
    shown = [r for r in rows if r["ratio"] and r["ratio"].get("ci")]
    models = list(dict.fromkeys(r["model"] for r in shown))
    drawn = [r["ratio"]["ci"][0 if r["bound"] == "lower" else 1] for r in shown]  # a bound's end
    top = max([x for x in drawn if x is not None and math.isfinite(x)] + [0.1])
    arrow = 0.15 * top
    fig = Figure(figsize=(max(4.5, 1.5 * len(names) + 2), 4), dpi=120)
    ax = fig.subplots()
    for i, m in enumerate(models):
        ax.plot([], [], "o", color=f"C{i % 10}", label=m)
    for r in shown:
        i = models.index(r["model"])
        x = names.index(r["budget"]) + (i - (len(models) - 1) / 2) * 0.6 / len(models)
        kw = {"color": f"C{i % 10}"}
        (lo, hi), v = r["ratio"]["ci"], r["ratio"].get("value")
        if r["bound"] == "lower" or (r["bound"] == "upper" and hi is not None):
            y, dy = (lo, arrow) if r["bound"] == "lower" else (hi, -min(arrow, hi))
            ax.plot([x], [y], "^" if dy > 0 else "v", mfc="none", **kw)
            ax.annotate("", xy=(x, y + dy), xytext=(x, y), arrowprops={"arrowstyle": "->", **kw})
        elif r["status"] == "measured":
            ax.errorbar([x], [v], yerr=[[v - lo], [hi - v]], fmt="o", capsize=4, **kw)
        elif hi is not None:  # a bound with no side: its interval, open, not a measurement
            ax.errorbar([x], [(lo + hi) / 2], yerr=[[(hi - lo) / 2]], fmt="o", mfc="none",
                        capsize=4, **kw)
    ax.set_xticks(range(len(names)), names)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylim(0, top + 1.5 * arrow)  # room for a lower bound's arrow
    ax.set_ylabel("S_eff / S (open, arrow: a bound)")
    ax.set_title(f"{suite.name}: S_eff/S per budget, {suite.scoring['level'] * 100:g}% intervals",
                 fontsize=9)
    if models:
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    return path


def check_out_dir(out: Path) -> None:
    """ConfigError (one line naming --out) unless ``out`` is, or can be made, a writable folder."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file; give a folder")
    existing = next(p for p in [out, *out.absolute().parents] if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"--out {out}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: {existing} is not writable")
    if existing == out:
        try:
            with tempfile.NamedTemporaryFile(dir=out, prefix=".recallbench-"):
                pass
        except OSError as exc:
            raise ConfigError(f"--out {out}: cannot write a file there "
                              f"({exc.strerror or type(exc).__name__})") from None


def write_states(suite_dir: str | Path, out: str | Path, view: str = "mean",
                 command: str | None = None) -> list[str]:
    """Write states.json, README.md and states.png of a suite into ``out``; the messages.

    Every submission is validated first (``board.valid_board``); a refused one is a
    ConfigError naming it, and nothing is written.
    """
    if view not in VIEWS:
        raise ConfigError(f"--view {view!r}: must be one of {', '.join(VIEWS)}")
    suite, out = load_suite(suite_dir), Path(out)
    command = command or f"recallbench leaderboard states {suite_dir} --out {out} --view {view}"
    check_out_dir(out)
    subs = valid_board(suite.dir)
    if not subs:
        raise ConfigError(f"{suite_dir}: no submissions in {suite.dir / SUBMISSIONS_DIR}")
    sc = suite.scoring
    if suite.is_capacity:  # from the cards, not the grid scorer (capacity_board)
        from recallbench.leaderboard import run_card_board
        from recallbench.leaderboard.capacity_method import is_v2

        rows = capacity_board.state_rows(capacity_board.card_rows(suite, subs))
        view, note = (("card (every run)", run_card_board.STATES_NOTE) if is_v2(suite)
                      else ("card (best of seeds)", capacity_board.STATES_NOTE))
        data = {"schema": SCHEMA, "suite": suite.name, "view": view,
                "level": sc["level"], "command": command, "note": note, "cards": rows}
        text, what = capacity_board.states_markdown(suite, rows, command, note), "card(s)"
        figure = partial(cards_figure, suite, rows)
    else:
        rows = state_rows(suite, subs, view)
        data = {"schema": SCHEMA, "suite": suite.name, "view": view, "delta": sc["delta"],
                "level": sc["level"], "form": sc["form"], "command": command,
                "note": NO_STATE_NOTE, "submissions": rows}
        text, what = render_readme(suite, rows, view, command), "submission(s)"
        figure = partial(states_figure, rows, title=f"{suite.name}: pooled S_eff/S ({view}), "
                                                    f"{sc['level'] * 100:g}% intervals")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / STATES_JSON).write_text(json.dumps(plain(data), indent=2) + "\n", encoding="utf-8")
        (out / STATES_MD).write_text(text, encoding="utf-8")
        figure(out / STATES_PNG)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write ({exc.strerror or type(exc).__name__})") from None
    return [f"wrote {out / name} ({len(rows)} {what})" if name == STATES_JSON
            else f"wrote {out / name}" for name in (STATES_JSON, STATES_MD, STATES_PNG)]
