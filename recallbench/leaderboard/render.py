"""Rendering a suite's leaderboard: the ranked table in README.md, and the plot.

:func:`render` validates every submission of a suite as ``validate`` does (scores
recomputed, state sizes recomputed by the adapters, duplicates refused) and refuses to
render, naming the first refused file, when any fails; it then ranks one row per
(submission, budget) with ``table.leaderboard_rows``, and writes README.md
(:func:`render_markdown`, every interpolated string escaped by ``markdown``), the
accuracy-vs-state plot (``plot.render_plot``) and the
suite's web page, index.html (``page``); with ``check`` it only compares README.md and the
page with what it would write.  A capacity suite's board (cards, not a grid) is rendered
by ``capacity_board`` instead.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from recallbench.api.errors import ConfigError
from recallbench.leaderboard import capacity_board
from recallbench.leaderboard.board import valid_board
from recallbench.leaderboard.markdown import code, md, readme_head
from recallbench.leaderboard.page import PAGE, stale_page, write_page
from recallbench.leaderboard.plot import render_plot
from recallbench.leaderboard.suite import Suite, load_suite
from recallbench.leaderboard.table import (PLOT, README, RANKING_NOTE, UNCONVERGED_NOTE,
                                           leaderboard_rows, table)

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


def _each_renders(suite: Suite, subs: list[tuple[Path, Mapping]]) -> None:
    """Each valid capacity submission's README lines and page, made alone: a card that
    validation accepted but the board could not show (a bug here, not in the file's
    favour) is refused in one line naming its file, before anything is written."""
    for path, sub in subs:
        try:
            rows = capacity_board.card_rows(suite, [(path, sub)])
            capacity_board.render_markdown(suite, rows)
            capacity_board.page_html(suite, rows, {})
        except (TypeError, ValueError, KeyError, AttributeError, IndexError,
                OverflowError) as exc:
            detail = " ".join(str(exc).split())[:120]
            raise ConfigError(f"{path}: its cards cannot be shown ({type(exc).__name__}: "
                              f"{detail}); nothing rendered") from None


def render(suite_dir: str | Path, *, check: bool = False, plot: bool = True
           ) -> tuple[bool, list[str]]:
    """Write (or with ``check``, compare) the suite's README.md, plot and page (index.html).

    Returns (up_to_date, messages).  Every submission is validated first, with
    everything ``validate`` checks, so that nothing invalid is shown; one that fails is a
    ConfigError naming it, and nothing is written.
    """
    suite = load_suite(suite_dir)
    subs = valid_board(suite.dir)
    if suite.is_capacity:  # cards, not grid scores: ranked per budget (capacity_board)
        _each_renders(suite, subs)
        return capacity_board.render(suite, subs, check=check, plot=plot)
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
