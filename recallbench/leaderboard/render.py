"""Rendering a suite's leaderboard: the ranked table in README.md, and the plot.

:func:`render` validates every submission of a suite as ``validate`` does (scores
recomputed, state sizes recomputed by the adapters, duplicates refused) and refuses to
render, naming the first refused file, when any fails; it then ranks one row per
(submission, budget) with :func:`leaderboard_rows`, and writes README.md
(:func:`render_markdown`), the accuracy-vs-state plot (``plot.render_plot``) and the
suite's web page, index.html (``page``); with ``check`` it only compares README.md and the
page with what it would write.

Rows are ranked by recall capacity per state bit, N_f* / (b·S) (docs/theory.md, 'The
law'); models without a finite state S come last.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from recallbench.leaderboard.plot import render_plot
from recallbench.leaderboard.board import valid_board
from recallbench.leaderboard.suite import Suite, load_suite

README = "README.md"
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


def _intro_lines(suite: Suite) -> list[str]:
    """Title, description, and what the suite measures and how it ranks."""
    d = suite.data
    sc = suite.scoring
    tr = d.get("train") or {}
    lines = [f"# Leaderboard: {d.get('title') or suite.name}", "",
             "<!-- generated by `recallbench leaderboard render`; do not edit by hand -->", ""]
    if suite.retired:
        lines += [f"> **Retired**: {suite.retired}", ""]
    if d.get("description"):
        lines += [str(d["description"]).strip(), ""]
    task = ", ".join(f"{k}={v}" for k, v in d["task"].items())
    return lines + [
        f"- **task**: {task}; N_f ∈ {{{', '.join(map(str, suite.num_facts))}}}",
        "- **budgets**: " + "; ".join(f"{b['name']} ({', '.join(f'{k}={v}' for k, v in b['model'].items())})"
                                      for b in suite.budgets),
        f"- **recipe**: {', '.join(f'{k}={v}' for k, v in tr.items())}; {suite.lr_text()}; seeds {suite.seeds}",
        f"- **scoring**: mean over seeds (best learning rate); S_eff fitted with the law "
        f"({sc['form']}), capacity N_f*(δ={sc['delta']}), {int(sc['level'] * 100)}% intervals",
        "", RANKING_NOTE, ""]


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


def _table_lines(suite: Suite, rows: list[dict]) -> list[str]:
    """The ranked markdown table (a row of dashes when there are no submissions)."""
    head, body = table(suite, rows)
    lines = ["| " + " | ".join(h for _, h in head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    lines += ["| " + " | ".join(text for text, _ in cells) + " |" for cells in body]
    if not rows:
        lines.append("| " + " | ".join(["–"] * len(head)) + " |")
    if any(r["unconverged"] for r in rows):
        lines += ["", UNCONVERGED_NOTE]
    return lines


def _submission_lines(suite: Suite, rows: list[dict]) -> list[str]:
    """The plot, the list of submission files, and how to add a model."""
    lines = ["", f"![accuracy against state size]({PLOT})", "",
             "The same table, sortable, with the figure and a card per model: `index.html` "
             "(self-contained; open it in a browser).", "",
             "Submissions (in `submissions/`; check with `recallbench leaderboard validate`):", ""]
    for r in rows:
        lib = r["library"]
        lines.append(f"- `{r['file']}`: {r['model']} ({lib.get('name')} {lib.get('version') or ''}"
                     f"{', ' + lib['class'] if lib.get('class') else ''}), sha256 {r['sha']}…")
    if not rows:
        lines.append("- none yet")
    return lines + ["", "To add a model: `recallbench leaderboard run --suite leaderboards/"
                    f"{suite.name} --adapter NAME --store STORE`, then `recallbench submit --suite "
                    f"leaderboards/{suite.name} --store STORE --model-name NAME`, then "
                    f"`recallbench leaderboard render leaderboards/{suite.name}`.", ""]


def render_markdown(suite: Suite, rows: list[dict]) -> str:
    """The suite's README.md: intro, ranked table, plot and submissions."""
    return "\n".join(_intro_lines(suite) + _table_lines(suite, rows) + _submission_lines(suite, rows))


def _check_fresh(suite: Suite, text: str, rows: list[dict], subs: list[tuple[Path, Mapping]]
                 ) -> tuple[bool, list[str]]:
    from recallbench.leaderboard.page import PAGE, stale_page

    readme = suite.dir / README
    msgs = []
    current = readme.read_text(encoding="utf-8") if readme.is_file() else None
    fresh = current == text
    if not fresh:
        msgs.append(f"{readme} is stale: run `recallbench leaderboard render {suite.dir}`")
    if rows and not (suite.dir / PLOT).is_file():
        fresh = False
        msgs.append(f"{suite.dir / PLOT} is missing: run `recallbench leaderboard render {suite.dir}`")
    page = stale_page(suite, rows, subs, suite.dir / PAGE)
    if page:
        fresh = False
        msgs.append(f"{page}: run `recallbench leaderboard render {suite.dir}`")
    return fresh, msgs


def render(suite_dir: str | Path, *, check: bool = False, plot: bool = True
           ) -> tuple[bool, list[str]]:
    """Write (or with ``check``, compare) the suite's README.md, plot and page (index.html).

    Returns (up_to_date, messages).  Every submission is validated first, with
    everything ``validate`` checks, so that nothing invalid is shown; one that fails is a
    ConfigError naming it, and nothing is written.
    """
    suite = load_suite(suite_dir)
    subs = valid_board(suite.dir)
    rows = leaderboard_rows(suite, subs)
    text = render_markdown(suite, rows)
    if check:
        return _check_fresh(suite, text, rows, subs)
    readme = suite.dir / README
    readme.write_text(text, encoding="utf-8")
    msgs = [f"wrote {readme} ({len(rows)} row(s))"]
    if plot:
        render_plot(suite, rows, suite.dir / PLOT)
        msgs.append(f"wrote {suite.dir / PLOT}")
    from recallbench.leaderboard.page import PAGE, write_page

    png = (suite.dir / PLOT).read_bytes() if plot else None
    write_page(suite, rows, subs, suite.dir / PAGE, png)
    msgs.append(f"wrote {suite.dir / PAGE}")
    return True, msgs
