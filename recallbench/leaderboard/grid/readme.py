"""A grid suite's board: README.md (intro, ranked table, plot, submissions), the
accuracy-vs-state plot and the web page, written or, with ``check``, compared.

Rows are one per (submission, budget), ranked by ``table.leaderboard_rows``; every string
interpolated into README.md is escaped by ``markdown``; the plot is ``plot.render_plot``'s
and the page ``page``'s.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from recallbench.leaderboard.grid.page import stale_page, write_page
from recallbench.leaderboard.grid.plot import render_plot
from recallbench.leaderboard.grid.table import (PLOT, RANKING_NOTE, UNCONVERGED_NOTE,
                                                leaderboard_rows, table)
from recallbench.leaderboard.markdown import README, code, md, readme_head
from recallbench.leaderboard.page import PAGE
from recallbench.leaderboard.suite import Suite


def _intro_lines(suite: Suite) -> list[str]:
    """Title, description, and what the suite measures and how it ranks."""
    d = suite.data
    sc = suite.scoring
    tr = d.get("train") or {}
    lines = readme_head(suite)
    task = ", ".join(f"{k}={v}" for k, v in d["task"].items())
    budgets = "; ".join(f"{b['name']} ({', '.join(f'{k}={v}' for k, v in b['model'].items())})"
                        for b in suite.budgets)
    recipe = f"{', '.join(f'{k}={v}' for k, v in tr.items())}; {suite.lr_text()}; seeds {suite.seeds}"
    return lines + [
        f"- **task**: {md(task)}; N_f ∈ {{{md(', '.join(map(str, suite.num_facts)))}}}",
        f"- **budgets**: {md(budgets)}",
        f"- **recipe**: {md(recipe)}",
        f"- **scoring**: mean over seeds (best learning rate); S_eff fitted with the law "
        f"({md(sc['form'])}), capacity N_f*(δ={md(sc['delta'])}), {md(int(sc['level'] * 100))}% "
        "intervals",
        "", RANKING_NOTE, ""]


def _table_lines(suite: Suite, rows: list[dict]) -> list[str]:
    """The ranked markdown table (a row of dashes when there are no submissions)."""
    head, body = table(suite, rows)
    lines = ["| " + " | ".join(md(h) for _, h in head) + " |",
             "|" + "|".join(["---"] * len(head)) + "|"]
    lines += ["| " + " | ".join(md(text) for text, _ in cells) + " |" for cells in body]
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
    listed = set()
    for r in rows:  # one row per budget: each file once, in rank order
        if r["file"] in listed:
            continue
        listed.add(r["file"])
        lib = r["library"]
        what = (f"{lib.get('name')} {lib.get('version') or ''}"
                f"{', ' + str(lib['class']) if lib.get('class') else ''}")
        lines.append(f"- {code(r['file'])}: {md(r['model'])} ({md(what)}), sha256 {md(r['sha'])}…")
    if not rows:
        lines.append("- none yet")
    where = f"leaderboards/{suite.name}"
    return lines + ["", f"To add a model: "
                    f"{code(f'recallbench leaderboard run --suite {where} --adapter NAME --store STORE')}"
                    f", then {code(f'recallbench submit --suite {where} --store STORE --model-name NAME')}"
                    f", then {code(f'recallbench leaderboard render {where}')}.", ""]


def render_markdown(suite: Suite, rows: list[dict]) -> str:
    """The suite's README.md: intro, ranked table, plot and submissions."""
    return "\n".join(_intro_lines(suite) + _table_lines(suite, rows) + _submission_lines(suite, rows))


def _check_fresh(suite: Suite, text: str, rows: list[dict], subs: list[tuple[Path, Mapping]]
                 ) -> tuple[bool, list[str]]:
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


def render_grid(suite: Suite, subs: list[tuple[Path, Mapping]], *, check: bool = False,
                plot: bool = True) -> tuple[bool, list[str]]:
    """Write (or with ``check``, compare) README.md, the plot and index.html of a grid suite
    from its valid submissions ``subs``; (up_to_date, messages)."""
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
    png = (suite.dir / PLOT).read_bytes() if plot else None
    write_page(suite, rows, subs, suite.dir / PAGE, png)
    msgs.append(f"wrote {suite.dir / PAGE}")
    return True, msgs
