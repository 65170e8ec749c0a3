"""The ``recall summary`` at the end of a pytest run: one row per measurement.

    test  accuracy  correct/total  state  S_eff [95% CI]  steps  wall  baseline

then the number of training runs, the cache's share of them, the budget, the baseline
file, and the files written; :func:`write_summary` writes it to the terminal,
:func:`markdown_summary` as a Markdown table (for a CI job's summary page).
"""
from __future__ import annotations

import math

from recallbench.pytest_plugin.cache import CACHE, TRAINED
from recallbench.pytest_plugin.workers import counts

HEADER = ("test", "accuracy", "correct/total", "state", "S_eff [95% CI]", "steps", "wall",
          "baseline")


def short_number(x: float) -> str:
    """Three significant digits, without an exponent for S_eff's usual range (1040, not
    1.04e+03)."""
    if x == math.inf:
        return "inf"
    if 100 <= abs(x) < 1e7:
        return f"{float(f'{x:.3g}'):.0f}"
    return f"{x:.3g}"


def _row(m: dict) -> tuple[str, ...]:
    """One measurement's cells: test, accuracy, counts, state, S_eff, steps, wall, baseline."""
    rec = m.get("record")
    if rec is None:
        err = ("skipped: " if m.get("skipped") else "error: ") + (m.get("error") or "?")
        return (m["key"], "-", "", "", "", "", "", err if len(err) <= 90 else err[:89] + "…")
    state = "-" if rec["state_size"] is None else str(rec["state_size"])
    if m.get("effective_state") is None:
        seff = "-"
    elif m["effective_state"] == 0 and m.get("effective_state_error"):
        seff = f"no recall (<= {short_number(m['effective_state_ci'][1])})"
    else:
        lo, hi = m["effective_state_ci"]
        seff = f"{short_number(m['effective_state'])} [{short_number(lo)}, {short_number(hi)}]"
    base = m.get("baseline")
    if base is None:
        btxt = "-"
    elif base["accuracy"] is None:
        btxt = base["status"]
    else:
        btxt = f"{base['accuracy']:.4f} {base['status']}"
    return (m["key"], f"{rec['accuracy']:.4f}", f"{rec['correct']}/{rec['total']}",
            state, seff, str(rec["steps"]),
            f"{rec['wall_s']:.1f}s" if m.get("source") == TRAINED else "cached", btxt)


def _notes(session) -> str:
    """The line under the table: training runs, cache, budget, baseline."""
    n = counts(session.measurements)
    notes = [f"{n[TRAINED]} training run(s) for {len(session.measurements)} measurement(s)"]
    if session.cache_arg is not None:
        notes.append(f"cache {session.cache_arg}: {n[TRAINED]} trained, {n[CACHE]} from cache")
    if n["retrained"]:
        notes.append(f"{n['retrained']} trained again in another worker (a factory= that "
                     f"is a closure or functools.partial cannot be shared)")
    if session.budget != 1.0:
        notes.append(f"budget x{session.budget:g}")
    if session.baseline_path is not None:
        notes.append(f"baseline {session.baseline_arg} (tolerance {session.tolerance:g})")
    return "; ".join(notes)


def write_summary(tr, session) -> None:
    """Write the section for a :class:`~recallbench.pytest_plugin.session.RecallSession`."""
    tr.write_sep("=", "recall summary")
    rows = [HEADER, *(_row(m) for m in session.measurements)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    widths[0] = min(widths[0], 70)
    for r in rows:
        name = r[0] if len(r[0]) <= widths[0] else "…" + r[0][-(widths[0] - 1):]
        cells = [name.ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:-1], widths[1:-1])]
        tr.write_line("  ".join(cells + [r[-1]]).rstrip())
    tr.write_line(_notes(session))
    for path in session.written:
        is_baseline = session.baseline_path is not None and path == str(session.baseline_path)
        what = "baseline" if is_baseline else "report"
        tr.write_line(f"recall {what} written to {path}")
    for what in session.unwritten:
        tr.write_line(f"recall: cannot write {what}", red=True)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_summary(session) -> str:
    """The table and its notes as GitHub-flavoured Markdown (test ids as code)."""
    lines = ["### recall summary", "", "| " + " | ".join(HEADER) + " |",
             "|" + "|".join(["---"] + ["---:"] * 6 + ["---"]) + "|"]
    for row in (_row(m) for m in session.measurements):
        cells = [f"`{_cell(row[0])}`", *(_cell(c) for c in row[1:])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", _notes(session), "", ""])
