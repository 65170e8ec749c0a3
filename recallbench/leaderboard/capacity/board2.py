"""The board of a capacity suite of card method 2 (``capacity.method: 2``), from its cards.

Each budget carries a method-2 card (``law.run_card``, schema recallbench.card/2).  Per
budget, the **measured** cards of a fixed state are ranked by N50 per kbit of state
(``n50_per_kbit``) with its 95% interval: a card's rank is 1 + the number of the budget's
ranked cards whose interval lies entirely above its own.  Listed apart and never ranked:
**bounds** (N50 printed ≥ or ≤, or "unresolved in [a, b]", never as a measurement, with
why and where the search stopped), **no recall** (N50 ≤ the smallest N_f tried), and
measured cards whose state **grows with L** (no per-kbit figure).  Every card states its
training work in Mtok (millions of tokens trained) of the suite's work budget, its CPU
time, and the machine its runs name (``machine``: CPU model, CPUs, torch threads).

:mod:`recallbench.leaderboard.capacity.board` dispatches here for such a suite; the page is
built in ``page``'s frame, each card's figure drawn by ``law.run_card_render.draw``.
"""
from __future__ import annotations

import base64
import statistics
from pathlib import Path
from typing import Mapping

from recallbench.law.card_render import estimate, num
from recallbench.law.run_card import MAX_SLOPE, MIN_OBSERVED, SIMULATED, WIDEN
from recallbench.law.run_card_render import draw, headline, shape_text
from recallbench.leaderboard.capacity.board import (APART, BOUND, GROWS, MEASURED, NO_RECALL,
                                                    _ci, _cpu_min, _html_table, _md_table, _state,
                                                    _why, apart, bounded, figures)
from recallbench.leaderboard.capacity import board_figure, reseed_docs, shapes_docs
from recallbench.leaderboard.capacity.method2 import machine_text, settings, target
from recallbench.leaderboard.markdown import code, md, readme_head
from recallbench.leaderboard.page import (PAGE, _e, _href, document, file_links, plain as text_of,
                                          without_images)
from recallbench.leaderboard.suite import SUBMISSIONS_DIR, Suite
from recallbench.leaderboard.markdown import README

HEAD = ("#", "model", "adapter", "S (shape)", "N50 [95%]", "N50 per kbit [95%]", "S_eff/S [95%]",
        "runs (batches)", "work Mtok", "CPU min", "machine")
CELL_HEAD = ("N_f", "L", "runs", "failed", "median accuracy", "min", "max", "guess",
             "at the guess")
RANKING_NOTE = (
    "Ranked per budget by **N50 per kbit of state**: N50, the number of facts N_f at which "
    "the model recalls half the queries above the guess (a probit line in ln N_f fitted to "
    "every run, its slope free), per 1,000 bits of state (b·S), with its 95% interval. Only "
    "measured cards are ranked. A card's rank is 1 + the number of ranked cards of its "
    "budget whose interval lies entirely above its own (their lower end above its upper "
    "end); two cards whose intervals overlap can still differ in rank, when a third card's "
    "interval lies above one of them and not the other.")
def _span(key: str) -> str:
    lo, hi = SIMULATED[key]
    return f"{lo:g}–{hi:g}"


def how_to_read(spread: float) -> str:
    """The board's "How to read", for its N50 interval target ``spread``."""
    return ("A card is **measured** when one cell's median run lies above half the queries above "
        f"the guess and another's below, at least {MIN_OBSERVED} runs are uncensored (neither at "
        "the guess, at the ceiling, nor cut by the step cap), the fitted slope is at most "
        f"{MAX_SLOPE:g} in ln N_f (a steep line's interval is narrow, and no simulated card "
        "stopped on a steeper one), and the N50 interval spans at most "
        f"a factor {spread:g}; that interval is the fit's stretched {WIDEN:g}-fold about N50 "
        "(on the log scale), since the search stops at the first narrow one. Otherwise it is a "
        "**bound**, with why: N50 ≥ a value when every "
        "cell lies above half (the capacity may lie beyond them), ≤ a value when every cell lies "
        "below, unresolved in [a, b] when the cells bracket it but its interval is too wide; "
        "never shown as a measurement. **No recall** means no run rose above its guess level: "
        "N50 ≤ the smallest N_f tried. S: state scalars per sequence, with the state's shape "
        "(heads × key × value, or the layer's own terms); S_eff/S: the state of the "
        "linear reference whose 50% point is the model's N50, over the model's own; runs "
        "(batches): the card's runs, and its batches of one run per seed at one N_f; work: "
        "millions of tokens (Mtok) trained, every learning-rate candidate counted, of the "
        "suite's work budget; CPU min: the CPU time of the card's runs, on the machine they "
        "name (CPU model, CPUs, torch threads), as the runs report it. †: the card's fit lies "
        "outside the shapes at which the interval's coverage is simulated (slope "
        f"{_span('slope')} in ln N_f, run-to-run SD {_span('tau')} probit, failure rate "
        f"{_span('failure_rate')}); its card names which (at a slope near 0.7 and a run SD near "
        "0.5, measured cards covered in about 90%: docs/results/capacity).")


def _kind(card: Mapping, state) -> str:
    if card.get("status") == NO_RECALL:
        return NO_RECALL
    if card.get("status") != MEASURED:
        return BOUND
    return MEASURED if state and card.get("n50_per_kbit") else GROWS


def card_rows(suite: Suite, subs: list[tuple[Path, Mapping]]) -> list[dict]:
    """One row per (submission, budget), in the suite's budget order, then by model."""
    order = {b["name"]: i for i, b in enumerate(suite.budgets)}
    rows = []
    for path, sub in subs:
        m = sub["model"]
        for b in sub["budgets"]:
            card = {**b["card"], "model": b["config"]["model"]}  # the renderer names it
            rows.append({"file": path.name, "model": m["name"], "adapter": m["adapter"],
                         "library": m.get("library") or {}, "sha": sub["sha256"][:12],
                         "budget": b["name"], "state_size": b["state_size"],
                         "shape": m.get("shape"),
                         "card": card, "kind": _kind(card, b["state_size"])})
    rows.sort(key=lambda r: (order.get(r["budget"], len(order)), r["model"].casefold()))
    return rows


def ranked(rows: list[dict], budget: str) -> list[dict]:
    """The budget's measured rows of a fixed state, each with its ``rank``."""
    mine = [r for r in rows if r["budget"] == budget and r["kind"] == MEASURED]
    cis = [_ci(r["card"]["n50_per_kbit"]) for r in mine]
    out = [{**r, "rank": 1 + sum(other_lo > hi for other_lo, _ in cis)}
           for r, (_, hi) in zip(mine, cis)]
    out.sort(key=lambda r: (r["rank"], -r["card"]["n50_per_kbit"]["value"],
                            r["model"].casefold()))
    return out


def _batches(card: Mapping) -> int:
    from recallbench.runs.card_search import seed_parts

    return len({(r["num_facts"], seed_parts(r["seed"])[1])
                for r in card.get("runs") or [] if r.get("seed") is not None})


def ranked_cells(r: Mapping) -> list[str]:
    """A ranked row's cells, in the order of :data:`HEAD`."""
    c = r["card"]
    mark = " †" if (c.get("simulated") or {}).get("outside") else ""
    return [str(r["rank"]), r["model"], r["adapter"], state_text(r),
            estimate(c.get("n50")) + mark,
            estimate(c.get("n50_per_kbit")), estimate(c.get("ratio")),
            f"{len(c.get('runs') or [])} ({_batches(c)})", num(c.get("work_mtok")),
            _cpu_min(c), machine_text(c)]


def state_text(r: Mapping) -> str:
    """S with the state's shape (``run_card_render.shape_text``) when the card names one."""
    shape = shape_text(r["card"].get("state_shape"))
    return _state(r) + (f" ({shape})" if shape and r["state_size"] else "")


def _spent(c: Mapping) -> str:
    return (f"work {num(c.get('work_mtok'))} of {num(c.get('work_budget_mtok'))} Mtok; "
            f"CPU {_cpu_min(c)} min on {machine_text(c)}")


def apart_text(r: Mapping) -> str:
    """One line for a card listed apart (a bound, no recall, a state that grows with L)."""
    c = r["card"]
    who = f"{r['model']} ({r['adapter']}), S = {state_text(r)}: "
    if r["kind"] == GROWS:
        return (who + f"N50 {estimate(c.get('n50'))}, S_eff {estimate(c.get('s_eff'))} (no "
                f"fixed S: no per-kbit figure); {_spent(c)}")
    side = "upper" if r["kind"] == NO_RECALL else (c.get("n50") or {}).get("bound")
    parts = [f"N50 {bounded(c.get('n50'), side)}"]
    parts += [f"N50 per kbit {bounded(c['n50_per_kbit'], side)}"] if c.get("n50_per_kbit") else []
    parts += [f"S_eff/S {bounded(c['ratio'], side)}"] if c.get("ratio") else []
    head = "no recall beyond guessing: " if r["kind"] == NO_RECALL else ""
    return (who + head + ", ".join(parts) + f" — why: {_why(c.get('why'))}; search stopped: "
            f"{_why(c.get('stopped'))}; {_spent(c)}")


def work_table(suite: Suite, rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Each submission's training work per budget's card, and its sums (work, CPU time)."""
    names = [b["name"] for b in suite.budgets]
    by: dict[str, dict] = {}
    for r in rows:
        e = by.setdefault(r["file"], {"model": r["model"], "adapter": r["adapter"], "cpu": 0.0})
        e[r["budget"]] = r["card"].get("work_mtok") or 0.0
        e["cpu"] += r["card"].get("cpu_s") or 0.0
    body = [[e["model"], e["adapter"], *(num(e[n]) if n in e else "–" for n in names),
             num(sum(e.get(n, 0.0) for n in names)), num(e["cpu"] / 60)] for e in by.values()]
    return ["model", "adapter", *(f"Mtok {n}" for n in names), "Mtok, all budgets",
            "CPU min, all budgets"], body


def work_summary(rows: list[dict]) -> str:
    """The board's cards in all (``rows``: at least one): their work, CPU time and the median
    card's CPU time; then the same without the shape entries and the states that grow with
    L, where the board has any (the cards a board of the layers' default shapes holds)."""
    def spent(rs):
        cpu = [(r["card"].get("cpu_s") or 0.0) / 60 for r in rs]
        work = sum(r["card"].get("work_mtok") or 0.0 for r in rs)
        return (f"{len(rs)} cards, {work:,.0f} Mtok of training and {sum(cpu) / 60:.1f} "
                f"CPU-hours", num(statistics.median(cpu)))

    total, median = spent(rows)
    text = (f"In all: {total}, summed over the machines the cards name; the median card took "
            f"{median} CPU-min.")
    core = [r for r in rows if not r.get("shape") and r["state_size"]]
    if core and len(core) < len(rows):
        total, median = spent(core)
        text += (f" Without the shape entries and the states that grow with L: {total}; the "
                 f"median card took {median} CPU-min.")
    return text


def intro_items(suite: Suite) -> list[tuple[str, str]]:
    d, s = suite.data, settings(suite)
    lo, hi = suite.facts_range()
    task = ", ".join(f"{k}={v}" for k, v in d["task"].items())
    budgets = "; ".join(f"{b['name']} ({', '.join(f'{k}={v}' for k, v in b['model'].items())})"
                        for b in suite.budgets)
    recipe = ", ".join(f"{k}={v}" for k, v in (d.get("train") or {}).items())
    return [("task", f"{task}; L = {d['seq_len_per_fact']}·N_f; N_f placed by each card's "
                     f"search, from {lo} to {hi}"),
            ("budgets", budgets),
            ("recipe", f"{recipe}; {suite.lr_text()}; seeds {', '.join(map(str, suite.seeds))} "
                       "(the j-th batch at N_f uses seeds s + 1000·j + 100000·N_f)"),
            ("search", f"card method 2: batches of one run per seed, at most "
                       f"{s['max_batches']} batches and a work budget of {s['work_budget']:g} "
                       "Mtok (millions of tokens trained, every learning-rate candidate "
                       f"counted) per budget; each new N_f within {s['max_step']:g}x those "
                       "measured; N50 fitted on every run (a probit line in ln N_f, its "
                       f"slope free), {int(suite.scoring['level'] * 100)}% intervals, a card "
                       f"measured within a factor {target(suite):g}")]


def render_markdown(suite: Suite, rows: list[dict], reseeds: list[dict] = ()) -> str:
    """The suite's README.md: intro, a ranking per budget, the cards apart, the state shapes
    (``shapes_docs``), work and time, the re-seeded cards (``reseed_docs.rows``)."""
    lines = readme_head(suite) + [f"- **{k}**: {md(v)}" for k, v in intro_items(suite)]
    lines += ["", f"![{board_figure.ALT}]({board_figure.FIGURE})", "", RANKING_NOTE]
    for b in suite.budgets:
        model = ", ".join(f"{k}={v}" for k, v in b["model"].items())
        # each model links to its card on the page: the cells and the figure
        body = [[_card_link(r, c) if j == 1 else md(c) for j, c in enumerate(ranked_cells(r))]
                for r in ranked(rows, b["name"])] or [["–"] * len(HEAD)]
        lines += ["", f"## {md(b['name'])} ({md(model)})", ""] + _md_table(HEAD, body, str)
        for kind, title in APART:
            if apart(rows, b["name"], kind):
                lines += ["", f"{title}:", ""]
                lines += [f"- {md(apart_text(r))} ({_card_link(r, 'card')})"
                          for r in apart(rows, b["name"], kind)]
    shapes = shapes_docs.groups(suite, rows)
    if shapes:
        lines += ["", "## State shapes at the same S", "", shapes_docs.NOTE, ""]
        lines += _md_table(shapes_docs.HEAD, shapes_docs.table(shapes))
    head, body = work_table(suite, rows)
    lines += ["", "## Training work and CPU time per adapter", ""]
    lines += _md_table(head, body or [["–"] * len(head)])
    lines += ["", md(work_summary(rows))] if rows else []
    if reseeds:
        lines += ["", "## Re-seeded cards", "", reseed_docs.NOTE, ""]
        lines += _md_table(reseed_docs.HEAD, reseed_docs.table(reseeds))
    lines += ["", "## How to read", "", how_to_read(target(suite)) + " More: "
              "[docs/capacity.md]"
              "(../../docs/capacity.md).", "",
              "Each card's figure (every run's share above the guess against N_f, the fitted "
              "line and N50) and its cells: `index.html` (self-contained; open it in a "
              "browser), where each model's name above leads.", "",
              "Submissions (in `submissions/`; check with `recallbench leaderboard validate`):", ""]
    for f in dict.fromkeys(r["file"] for r in rows):
        r = next(x for x in rows if x["file"] == f)
        what = f"{r['library'].get('name')} {r['library'].get('version') or ''}".strip()
        lines.append(f"- {code(f)}: {md(r['model'])} ({md(what)}), sha256 {md(r['sha'])}…")
    if not rows:
        lines.append("- none yet")
    where = f"leaderboards/{suite.name}"
    return "\n".join(lines + [
        "", "To reproduce a card or add a model: "
        f"{code(f'recallbench leaderboard run --suite {where} --adapter NAME --store STORE')}, "
        f"then {code(f'recallbench submit --suite {where} --store STORE --model-name NAME')}, "
        f"then {code(f'recallbench leaderboard render {where}')}.", ""])


def _cell_rows(card: Mapping) -> list[list[str]]:
    def acc(x):
        return "–" if x is None else f"{x:.4f}"
    return [[str(c["num_facts"]), text_of(c.get("seq_len")), str(c.get("runs")),
             str(c.get("failed")), acc(c.get("median")), acc(c.get("min")), acc(c.get("max")),
             num(c.get("guess")), str(c.get("at_guess"))] for c in card.get("cells") or []]


def _card_link(r: Mapping, text: str) -> str:
    """A Markdown link from ``text`` to the row's card on the board's page."""
    return f"[{md(text)}]({PAGE}#{card_id(r)})"


def card_id(r: Mapping) -> str:
    """The page's anchor of a row's card (its cells and figure)."""
    return f"card-{r['file']}-{r['budget']}"


def _card_html(r: Mapping, png: bytes | None) -> str:
    c = r["card"]
    if png is None:
        img = '<p class="note">The figure was not rendered (<code>--no-plot</code>).</p>'
    else:
        img = (f'<img alt="{_e("every run against N_f: " + r["model"] + ", " + r["budget"])}" '
               f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')
    status = c.get("status") + (f" ({_why(c['why'])})" if c.get("why") else "")
    items = [("status", status), ("search stopped", _why(c.get("stopped"))),
             ("training work", f"{num(c.get('work_mtok'))} of "
                               f"{num(c.get('work_budget_mtok'))} Mtok"),
             ("CPU time", f"{_cpu_min(c)} min"), ("machine", machine_text(c)),
             ("file", f"{SUBMISSIONS_DIR}/{r['file']}")]
    dl = "".join(f"<dt>{_e(k)}</dt><dd>" + (f'<a href="{_href(SUBMISSIONS_DIR, r["file"])}">'
                                            f"{_e(v)}</a>" if k == "file" else _e(v))
                 + "</dd>" for k, v in items)
    return "\n".join([f'<article class="card" id="{_e(card_id(r))}">',
                      f"<h3>{_e(text_of(r['model']))} · {_e(r['budget'])}</h3>",
                      f"<p>{_e(headline(c))}</p>", f"<figure>{img}</figure>", f"<dl>{dl}</dl>",
                      _html_table(CELL_HEAD, _cell_rows(c), ()), "</article>"])


def _board_img(pngs: Mapping | None) -> str:
    if pngs is None:
        return '<p class="note">The board\'s figure was not rendered (<code>--no-plot</code>).</p>'
    png = pngs.get(board_figure.FIGURE, b"")
    return (f'<figure><img alt="{_e(board_figure.ALT)}" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode()}"></figure>')


def page_html(suite: Suite, rows: list[dict], pngs: Mapping | None,
              reseeds: list[dict] = ()) -> str:
    """The page: intro, a ranking per budget, the cards apart, work and CPU time, the
    re-seeded cards, every card with its figure (``pngs`` by (file, budget); missing: an
    empty image; None: none)."""
    d = suite.data
    body = [f"<h1>Leaderboard: {_e(d.get('title') or suite.name)}</h1>"]
    if suite.retired:
        body.append(f'<p class="note"><strong>Retired</strong>: {_e(suite.retired)}</p>')
    if d.get("description"):
        body.append(f"<p>{_e(str(d['description']).strip())}</p>")
    body.append('<dl class="suite">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>"
                                               for k, v in intro_items(suite)) + "</dl>")
    body += [file_links(), _board_img(pngs),
             f'<p class="note">{_e(RANKING_NOTE.replace("**", ""))}</p>']
    cards = []
    for b in suite.budgets:
        model = ", ".join(f"{k}={v}" for k, v in b["model"].items())
        mine = ranked(rows, b["name"])
        linked = [[c if j != 1 else (c, "#" + card_id(r)) for j, c in enumerate(ranked_cells(r))]
                  for r in mine]
        body += [f'<h2 id="budget-{_e(b["name"])}">{_e(b["name"])} ({_e(model)})</h2>',
                 _html_table(HEAD, linked or [["–"] * len(HEAD)], (1, 2, 10))]
        for kind, title in APART:
            listed = apart(rows, b["name"], kind)
            if listed:
                body += [f"<h3>{_e(title)}</h3>",
                         "<ul>" + "".join(f'<li>{_e(apart_text(r))} <a href="#{_e(card_id(r))}">'
                                          "its card</a></li>" for r in listed) + "</ul>"]
            mine += listed
        cards += [_card_html(r, None if pngs is None else pngs.get((r["file"], r["budget"]), b""))
                  for r in mine]
    shapes = shapes_docs.groups(suite, rows)
    if shapes:
        body += ['<h2 id="shapes">State shapes at the same S</h2>',
                 f'<p class="note">{_e(shapes_docs.NOTE.replace("`", ""))}</p>',
                 _html_table(shapes_docs.HEAD, shapes_docs.table(shapes), (0, 1, 3, 5, 7))]
    head, work = work_table(suite, rows)
    body += ['<h2 id="work">Training work and CPU time per adapter</h2>',
             _html_table(head, work or [["–"] * len(head)], (0, 1))]
    body += [f'<p class="note">{_e(work_summary(rows))}</p>'] if rows else []
    if reseeds:
        body += ['<h2 id="reseeds">Re-seeded cards</h2>',
                 f'<p class="note">{_e(reseed_docs.NOTE.replace("`", ""))}</p>',
                 _html_table(reseed_docs.HEAD, reseed_docs.table(reseeds), (0, 1, 2, 3))]
    how = how_to_read(target(suite)).replace("**", "")
    body += ['<h2 id="how">How to read</h2>', f'<p>{_e(how)} More: '
             "docs/capacity.md in the repository.</p>", '<h2 id="cards">Cards</h2>',
             '<div class="cards">' + ("\n".join(cards) or "<p>No submissions yet.</p>") + "</div>"]
    return document(suite, body)


def render(suite: Suite, subs: list[tuple[Path, Mapping]], *, check: bool = False,
           plot: bool = True, check_scores: bool = True) -> tuple[bool, list[str]]:
    """Write (or with ``check``, compare) README.md and index.html: (up_to_date, messages);
    the re-seedings' cards replayed unless ``check_scores=False`` (only with ``check``)."""
    rows = card_rows(suite, subs)
    reseeds = reseed_docs.rows(reseed_docs.valid_reseeds(suite, subs,
                                                         check_scores=check_scores))
    text = render_markdown(suite, rows, reseeds)
    readme, page = suite.dir / README, suite.dir / PAGE
    again = f"run `recallbench leaderboard render {suite.dir}`"
    if check:
        msgs = []
        if not readme.is_file() or readme.read_text(encoding="utf-8") != text:
            msgs.append(f"{readme} is stale: {again}")
        if not page.is_file():
            msgs.append(f"{page} is missing: {again}")
        if rows and not (suite.dir / board_figure.FIGURE).is_file():
            msgs.append(f"{suite.dir / board_figure.FIGURE} is missing: {again}")
        elif (without_images(page.read_text(encoding="utf-8", errors="replace"))
              != without_images(page_html(suite, rows, {}, reseeds))):
            msgs.append(f"{page} is stale: {again}")
        return not msgs, msgs
    readme.write_text(text, encoding="utf-8")
    pngs = None
    if plot:
        pngs = figures(rows, draw)
        pngs[board_figure.FIGURE] = board_figure.draw_board(
            suite, rows, suite.dir / board_figure.FIGURE).read_bytes()
    page.write_text(page_html(suite, rows, pngs, reseeds), encoding="utf-8")
    n = sum(len(ranked(rows, b["name"])) for b in suite.budgets)
    return True, [f"wrote {readme} ({len(rows)} card(s), {n} ranked)", f"wrote {page}"]
