"""The board of a capacity suite (``Suite.is_capacity``: leaderboards/cpu-v3), from its cards.

A capacity suite's submission carries, per budget, a capacity card (``law.card``) instead
of a grid score.  Per budget, the **measured** cards of a fixed state are ranked by N_f* at
p = 0.5 per kbit of state (``capacity.p50_per_kbit``) with its 95% interval; cards whose
intervals overlap share a rank: a card's rank is 1 + the number of cards whose interval
lies entirely above its own.  Listed apart and never ranked: **bounds** (printed ≥ or ≤,
never as a measurement, with why and where the search stopped), **no recall** beyond
guessing (S_eff ≤ an upper bound), and measured cards whose state **grows with L**
(attention: no per-kbit figure, their N_f* at 0.5 shown).  Each adapter's CPU time (the
card's ``cpu_s``) is reported per card and summed over its budgets.

    rows = card_rows(suite, subs)         # one row per (submission, budget)
    ranked(rows, "D32-N8")                # the budget's ranked rows, each with its "rank"
    render(suite, subs, check=False)      # README.md and index.html (``leaderboard render``)
    state_rows(rows)                      # ``leaderboard states``: S_eff/S per card

The page is built in ``page``'s frame (CSP, escaping with ``page._e``); each card is a
figure drawn by ``law.card_render.draw`` into a temporary folder and embedded as a data
URI, with a compact table of its cells.  A suite of card method 2 has its own board
(``capacity.board2``: N50 per kbit, Mtok of training); the functions here hand it over.
"""
from __future__ import annotations

import base64
import math
import tempfile
from pathlib import Path
from typing import Mapping

from recallbench.law.card import CEILING, MAX_SPREAD, MIN_MID
from recallbench.law.card_render import draw, estimate, headline, num
from recallbench.leaderboard.markdown import code, md, readme_head
from recallbench.leaderboard.page import (PAGE, TEXT_LIMIT, _cut, _e, _href, document, file_links,
                                          plain as text_of, without_images)
from recallbench.leaderboard.suite import SUBMISSIONS_DIR, Suite
from recallbench.leaderboard.markdown import README

MEASURED, BOUND, NO_RECALL, GROWS = "measured", "bound", "no recall", "grows with L"
HEAD = ("#", "model", "adapter", "S", "S_eff/S [95%]", "N_f* at p = 0.5 [95%]",
        "per kbit [95%]", "cells (fitted)", "CPU min", "optimisation failures")
CELL_HEAD = ("N_f", "L", "accuracy [95%]", "guess", "recall", "converged", "extended", "steps", "lr")
APART = ((BOUND, "Bounds (not ranked)"), (NO_RECALL, "No recall beyond guessing (not ranked)"),
         (GROWS, "State grows with L (no per-kbit figure; not ranked)"))
RANKING_NOTE = (
    "Ranked per budget by **N_f* at p = 0.5 per kbit of state**: the number of facts at "
    "which the fitted law recalls half the queries, per 1,000 bits of state (b·S), with its "
    "95% interval. Only measured cards are ranked. A card's rank is 1 + the number of "
    "cards whose interval lies entirely above its own; two cards whose intervals overlap "
    "can still differ in rank, when a third card's interval lies above one of them and not "
    "the other.")
HOW_TO_READ = (
    f"A card is **measured** when at least {MIN_MID} converged cells lie strictly between "
    f"the guess level and {CEILING}, on both sides of p = 0.5, and the S_eff interval spans "
    f"at most a factor {MAX_SPREAD}. Otherwise it is a **bound**, stopped by the search's "
    "CPU budget or cell limit: its S_eff is ≥ a value when its largest N_f is at the ceiling or "
    "was cut by the step cap (more state could hide there), ≤ a value when no cell rose "
    "clearly above the guess, and is never shown as a measurement. **No recall** means no "
    "cell is above its guess level at 95%: S_eff = 0 with the upper bound its cells leave. "
    "S: state scalars per sequence; S_eff/S: the state of the linear reference that "
    "reproduces the cells, over the model's own; cells: the N_f the search visited (those in "
    "the fit); CPU min: the CPU time of the card's runs; optimisation failures: seeds left at "
    "the guess level while another seed of the cell learned.")


def _v2(suite: Suite):
    """The board module of a suite of card method 2 (``capacity.board2``), else None."""
    from recallbench.leaderboard.capacity import board2 as run_card_board

    return run_card_board if suite.capacity_method == 2 else None


def _kind(card: Mapping, state) -> str:
    if card.get("status") == NO_RECALL:
        return NO_RECALL
    if card.get("status") != MEASURED:
        return BOUND
    return MEASURED if state and (card.get("capacity") or {}).get("p50_per_kbit") else GROWS


def card_rows(suite: Suite, subs: list[tuple[Path, Mapping]]) -> list[dict]:
    """One row per (submission, budget), in the suite's budget order, then by model."""
    if _v2(suite):
        return _v2(suite).card_rows(suite, subs)
    order = {b["name"]: i for i, b in enumerate(suite.budgets)}
    rows = []
    for path, sub in subs:
        m = sub["model"]
        for b in sub["budgets"]:
            card = {**b["card"], "model": b["config"]["model"]}  # card_render needs the model
            rows.append({"file": path.name, "model": m["name"], "adapter": m["adapter"],
                         "library": m.get("library") or {}, "sha": sub["sha256"][:12],
                         "budget": b["name"], "state_size": b["state_size"],
                         "card": card, "kind": _kind(card, b["state_size"])})
    rows.sort(key=lambda r: (order.get(r["budget"], len(order)), r["model"].casefold()))
    return rows


def _ci(entry: Mapping) -> tuple[float, float]:
    lo, hi = (list(entry.get("ci") or []) + [None, None])[:2]
    return (0.0 if lo is None else float(lo)), (math.inf if hi is None else float(hi))


def ranked(rows: list[dict], budget: str) -> list[dict]:
    """The budget's measured rows of a fixed state, each with its shared ``rank``."""
    mine = [r for r in rows if r["budget"] == budget and r["kind"] == MEASURED]
    cis = [_ci(r["card"]["capacity"]["p50_per_kbit"]) for r in mine]
    out = [{**r, "rank": 1 + sum(other_lo > hi for other_lo, _ in cis)}
           for r, (_, hi) in zip(mine, cis)]
    out.sort(key=lambda r: (r["rank"], -r["card"]["capacity"]["p50_per_kbit"]["value"],
                            r["model"].casefold()))
    return out


def apart(rows: list[dict], budget: str, kind: str) -> list[dict]:
    return [r for r in rows if r["budget"] == budget and r["kind"] == kind]


def _state(r: Mapping) -> str:
    return "grows with L" if not r["state_size"] else str(int(r["state_size"]))


def _cpu_min(card: Mapping) -> str:
    return num((card.get("cpu_s") or 0.0) / 60)


def ranked_cells(r: Mapping) -> list[str]:
    """A ranked row's cells, in the order of :data:`HEAD`."""
    c = r["card"]
    cap, opt = c["capacity"], c.get("optimisation_failures") or {}
    return [str(r["rank"]), r["model"], r["adapter"], _state(r), estimate(c.get("ratio")),
            estimate(cap.get("p50")), estimate(cap.get("p50_per_kbit")),
            f"{len(c.get('cells') or [])} ({len(c.get('fitted_cells') or [])})", _cpu_min(c),
            f"{opt.get('count', 0)} of {opt.get('runs', 0)} runs"]


def bounded(entry: Mapping | None, side: str | None) -> str:
    """A bound's value: ≥ its lower end, ≤ its upper end, or its interval said unresolved."""
    if not entry or not entry.get("ci"):
        return "–"
    lo, hi = entry["ci"]
    if side == "lower":
        return f"≥ {num(lo)}"
    if side == "upper":
        return f"≤ {'∞' if hi is None else num(hi)}"
    return f"unresolved in [{num(lo)}, {'∞' if hi is None else num(hi)}] (not a measurement)"


def apart_text(r: Mapping) -> str:
    """One line for a card listed apart (a bound, no recall, a state that grows with L)."""
    c = r["card"]
    who = f"{r['model']} ({r['adapter']}), S = {_state(r)}: "
    cpu = f"; CPU {_cpu_min(c)} min"
    p50 = (c.get("capacity") or {}).get("p50")
    if r["kind"] == GROWS:
        return (who + f"S_eff {estimate(c.get('s_eff'))}, N_f* at p = 0.5 {estimate(p50)} "
                "(no fixed S: no per-kbit figure)" + cpu)
    side = "upper" if r["kind"] == NO_RECALL else (c.get("s_eff") or {}).get("bound")
    parts = [f"S_eff {bounded(c.get('s_eff'), side)}"]
    parts += [f"S_eff/S {bounded(c['ratio'], side)}"] if c.get("ratio") else []
    parts += [f"N_f* at p = 0.5 {bounded(p50, side)}"] if p50 else []
    head = "no recall beyond guessing: " if r["kind"] == NO_RECALL else ""
    return (who + head + ", ".join(parts) + f" — why: {_why(c.get('why'))}; search stopped: "
            f"{_why(c.get('stopped'))}" + cpu)


def _why(text) -> str:
    """A card's free text (why, stopped), cut to a bounded length."""
    return _cut(" ".join(str(text).split()), 2 * TEXT_LIMIT) if text else "–"


def cpu_table(suite: Suite, rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Each submission's CPU minutes per budget's card, and their sum."""
    names = [b["name"] for b in suite.budgets]
    by: dict[str, dict] = {}
    for r in rows:
        by.setdefault(r["file"], {"model": r["model"], "adapter": r["adapter"]})[r["budget"]] = \
            (r["card"].get("cpu_s") or 0.0)
    body = [[e["model"], e["adapter"], *(num(e[n] / 60) if n in e else "–" for n in names),
             num(sum(e.get(n, 0.0) for n in names) / 60)] for e in by.values()]
    return ["model", "adapter", *(f"CPU min {n}" for n in names), "CPU min, all budgets"], body


def _intro_items(suite: Suite) -> list[tuple[str, str]]:
    d, sc, cap = suite.data, suite.scoring, suite.capacity
    lo, hi = suite.facts_range()
    task = ", ".join(f"{k}={v}" for k, v in d["task"].items())
    budgets = "; ".join(f"{b['name']} ({', '.join(f'{k}={v}' for k, v in b['model'].items())})"
                        for b in suite.budgets)
    recipe = ", ".join(f"{k}={v}" for k, v in (d.get("train") or {}).items())
    return [("task", f"{task}; L = {d['seq_len_per_fact']}·N_f; N_f placed by each card's "
                     f"search, from {lo} to {hi}"),
            ("budgets", budgets),
            ("recipe", f"{recipe}; {suite.lr_text()}; seeds {', '.join(map(str, suite.seeds))}"),
            ("search", f"at most {cap['max_cells']} cells and {cap['cpu_budget_min']:g} CPU-min per "
                       f"budget{_step_text(cap)}; best of seeds per cell; S_eff fitted with the law ({sc['form']}), "
                       f"δ = {sc['delta']}, {int(sc['level'] * 100)}% intervals")]


def _step_text(cap) -> str:
    step = cap.get("max_step")
    text = "" if step is None else f"; each new N_f within {step:g}x those measured"
    if cap.get("fit_budget"):
        text += ("; a next cell that would not fit the budget left becomes the largest N_f "
                 "that does")
    return text


def _md_table(head, body, escape=md) -> list[str]:
    """A Markdown table; ``escape=str`` for cells already written as Markdown."""
    lines = ["| " + " | ".join(md(h) for h in head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    return lines + ["| " + " | ".join(escape(x) for x in cells) + " |" for cells in body]


def render_markdown(suite: Suite, rows: list[dict]) -> str:
    """The suite's README.md: intro, a ranking per budget, the cards apart, CPU time."""
    if _v2(suite):
        return _v2(suite).render_markdown(suite, rows)
    lines = readme_head(suite)
    lines += [f"- **{k}**: {md(v)}" for k, v in _intro_items(suite)]
    lines += ["", RANKING_NOTE.replace("N_f*", "N_f\\*")]
    for b in suite.budgets:
        model = ", ".join(f"{k}={v}" for k, v in b["model"].items())
        body = [ranked_cells(r) for r in ranked(rows, b["name"])] or [["–"] * len(HEAD)]
        lines += ["", f"## {md(b['name'])} ({md(model)})", ""] + _md_table(HEAD, body)
        for kind, title in APART:
            if apart(rows, b["name"], kind):
                lines += ["", f"{title}:", ""]
                lines += [f"- {md(apart_text(r))}" for r in apart(rows, b["name"], kind)]
    head, body = cpu_table(suite, rows)
    lines += ["", "## CPU time per adapter", ""] + _md_table(head, body or [["–"] * len(head)])
    lines += ["", "## How to read", "", HOW_TO_READ + " More: [docs/capacity.md]"
              "(../../docs/capacity.md).", "",
              "Each card's figure (accuracy against N_f with the fitted law) and its cells: "
              "`index.html` (self-contained; open it in a browser).", "",
              "Submissions (in `submissions/`; check with `recallbench leaderboard validate`):", ""]
    for f in dict.fromkeys(r["file"] for r in rows):
        r = next(x for x in rows if x["file"] == f)
        lib = r["library"]
        what = f"{lib.get('name')} {lib.get('version') or ''}".strip()
        lines.append(f"- {code(f)}: {md(r['model'])} ({md(what)}), sha256 {md(r['sha'])}…")
    if not rows:
        lines.append("- none yet")
    where = f"leaderboards/{suite.name}"
    return "\n".join(lines + [
        "", "To reproduce a card or add a model: "
        f"{code(f'recallbench leaderboard run --suite {where} --adapter NAME --store STORE')}, "
        f"then {code(f'recallbench submit --suite {where} --store STORE --model-name NAME')}, "
        f"then {code(f'recallbench leaderboard render {where}')}.", ""])


# -- index.html -------------------------------------------------------------------------

def figures(rows: list[dict], draw=draw) -> dict[tuple[str, str], bytes]:
    """Each card's figure (``draw``: its method's) as PNG bytes, keyed by (file, budget)."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, r in enumerate(rows):
            out[(r["file"], r["budget"])] = draw(r["card"], Path(tmp) / f"card{i}.png").read_bytes()
    return out


def _html_cell(x) -> str:
    """A cell's text, or a (text, href) pair as a link."""
    if isinstance(x, tuple):
        return f'<a href="{_e(x[1])}">{_e(x[0])}</a>'
    return _e(x)


def _html_table(head, body, text_cols=(1, 2)) -> str:
    cls = [' class="text"' if j in text_cols else "" for j in range(len(head))]
    ths = "".join(f'<th scope="col"{k}>{_e(h)}</th>' for k, h in zip(cls, head))
    trs = ["<tr>" + "".join(f"<td{k}>{_html_cell(x)}</td>" for k, x in zip(cls, cells))
           + "</tr>" for cells in body]
    return (f'<div class="table-wrap"><table><thead><tr>{ths}</tr></thead><tbody>'
            + "\n".join(trs) + "</tbody></table></div>")


def _cell_rows(card: Mapping) -> list[list[str]]:
    out = []
    for c in card.get("cells") or []:
        acc = "failed" if c.get("accuracy") is None else \
            f"{c['accuracy']:.4f} [{c['ci'][0]:.4f}, {c['ci'][1]:.4f}]"
        conv = "yes" if c.get("converged") else "no (cap: a lower bound)"
        out.append([str(c["num_facts"]), text_of(c.get("seq_len")), acc, num(c.get("guess")),
                    "yes" if c.get("recall") else "no", conv, str(c.get("extended") or 0),
                    text_of(c.get("steps")), num(c.get("lr"))])
    return out


def _card_html(r: Mapping, png: bytes | None) -> str:
    c = r["card"]
    if png is None:
        img = '<p class="note">The figure was not rendered (<code>--no-plot</code>).</p>'
    else:
        img = (f'<img alt="{_e("accuracy against N_f: " + r["model"] + ", " + r["budget"])}" '
               f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')
    status = c.get("status") + (f" ({_why(c['why'])})" if c.get("why") else "")
    items = [("status", status), ("search stopped", _why(c.get("stopped"))),
             ("CPU time", f"{_cpu_min(c)} min"),
             ("file", f"{SUBMISSIONS_DIR}/{r['file']}")]
    dl = "".join(f"<dt>{_e(k)}</dt><dd>" + (f'<a href="{_href(SUBMISSIONS_DIR, r["file"])}">'
                                            f"{_e(v)}</a>" if k == "file" else _e(v))
                 + "</dd>" for k, v in items)
    return "\n".join([f'<article class="card" id="card-{_e(r["file"])}-{_e(r["budget"])}">',
                      f"<h3>{_e(text_of(r['model']))} · {_e(r['budget'])}</h3>",
                      f"<p>{_e(headline(c))}</p>", f"<figure>{img}</figure>", f"<dl>{dl}</dl>",
                      _html_table(CELL_HEAD, _cell_rows(c), ()), "</article>"])


def page_html(suite: Suite, rows: list[dict], pngs: Mapping | None) -> str:
    """The page: intro, a ranking per budget, the cards apart, CPU time, every card with
    its figure (``pngs`` by (file, budget); missing: an empty image; None: not rendered)."""
    if _v2(suite):
        return _v2(suite).page_html(suite, rows, pngs)
    d = suite.data
    body = [f"<h1>Leaderboard: {_e(d.get('title') or suite.name)}</h1>"]
    if suite.retired:
        body.append(f'<p class="note"><strong>Retired</strong>: {_e(suite.retired)}</p>')
    if d.get("description"):
        body.append(f"<p>{_e(str(d['description']).strip())}</p>")
    body.append('<dl class="suite">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>"
                                               for k, v in _intro_items(suite)) + "</dl>")
    body += [file_links(), f'<p class="note">{_e(RANKING_NOTE.replace("**", ""))}</p>']
    cards = []
    for b in suite.budgets:
        model = ", ".join(f"{k}={v}" for k, v in b["model"].items())
        mine = ranked(rows, b["name"])
        body += [f'<h2 id="budget-{_e(b["name"])}">{_e(b["name"])} ({_e(model)})</h2>',
                 _html_table(HEAD, [ranked_cells(r) for r in mine] or [["–"] * len(HEAD)])]
        for kind, title in APART:
            listed = apart(rows, b["name"], kind)
            if listed:
                body += [f"<h3>{_e(title)}</h3>",
                         "<ul>" + "".join(f"<li>{_e(apart_text(r))}</li>" for r in listed) + "</ul>"]
            mine += listed
        cards += [_card_html(r, None if pngs is None else pngs.get((r["file"], r["budget"]), b""))
                  for r in mine]
    head, cpu = cpu_table(suite, rows)
    body += ['<h2 id="cpu">CPU time per adapter</h2>',
             _html_table(head, cpu or [["–"] * len(head)], (0, 1)),
             '<h2 id="how">How to read</h2>', f'<p>{_e(HOW_TO_READ.replace("**", ""))} More: '
             "docs/capacity.md in the repository.</p>", '<h2 id="cards">Cards</h2>',
             '<div class="cards">' + ("\n".join(cards) or "<p>No submissions yet.</p>") + "</div>"]
    return document(suite, body)


def render(suite: Suite, subs: list[tuple[Path, Mapping]], *, check: bool = False,
           plot: bool = True, check_scores: bool = True) -> tuple[bool, list[str]]:
    """Write (or with ``check``, compare) README.md and index.html: (up_to_date, messages)."""
    if _v2(suite):
        return _v2(suite).render(suite, subs, check=check, plot=plot,
                                 check_scores=check_scores)
    rows = card_rows(suite, subs)
    text = render_markdown(suite, rows)
    readme, page = suite.dir / README, suite.dir / PAGE
    again = f"run `recallbench leaderboard render {suite.dir}`"
    if check:
        msgs = []
        if not readme.is_file() or readme.read_text(encoding="utf-8") != text:
            msgs.append(f"{readme} is stale: {again}")
        if not page.is_file():
            msgs.append(f"{page} is missing: {again}")
        elif (without_images(page.read_text(encoding="utf-8", errors="replace"))
              != without_images(page_html(suite, rows, {}))):
            msgs.append(f"{page} is stale: {again}")
        return not msgs, msgs
    readme.write_text(text, encoding="utf-8")
    page.write_text(page_html(suite, rows, figures(rows) if plot else None), encoding="utf-8")
    n = sum(len(ranked(rows, b["name"])) for b in suite.budgets)
    return True, [f"wrote {readme} ({len(rows)} card(s), {n} ranked)", f"wrote {page}"]
