"""A grid suite's leaderboard as one self-contained web page, ``<suite>/index.html``.

The page shows what README.md shows, for a browser: the ranked table (``table.table``;
click a header to sort, or open ``index.html#sort=per_kbit&dir=desc``), the figure
(``plot``, the PNG embedded as a data URI), and a card per submission: provenance, the
recipe and the learning rates chosen, convergence, and links to the submission files
(relative, so the page works from a checkout or any static host).  Fields a submission
may carry or not (``provenance``, ``lr_search``, ``converged``, ``steps_to``) show "—"
when absent.  The frame (head, escaping, script and style) is :mod:`recallbench.leaderboard.page`'s.
"""
from __future__ import annotations

import base64
import math
import re
import statistics
from pathlib import Path
from typing import Any, Mapping

from recallbench.leaderboard.grid.table import PLOT, RANKING_NOTE, lr_means, table
from recallbench.leaderboard.page import (LIST_LIMIT, MISSING, TEXT_LIMIT, _cut, _e, _href,
                                          document, file_links, plain, without_images)
from recallbench.leaderboard.suite import SUBMISSIONS_DIR, Suite

def _intro(suite: Suite) -> list[str]:
    """Title, description, and what the suite measures."""
    d = suite.data
    task = ", ".join(f"{k}={v}" for k, v in d["task"].items())
    budgets = "; ".join(f"{b['name']} ({', '.join(f'{k}={v}' for k, v in b['model'].items())})"
                        for b in suite.budgets)
    recipe = ", ".join(f"{k}={v}" for k, v in (d.get("train") or {}).items())
    sc = suite.scoring
    items = [("task", f"{task}; N_f ∈ {{{', '.join(map(str, suite.num_facts))}}}"),
             ("budgets", budgets),
             ("recipe", f"{recipe}; {suite.lr_text()}; seeds "
                        f"{', '.join(map(str, suite.seeds))}"),
             ("scoring", f"mean over seeds (best learning rate); S_eff fitted with the law "
                         f"({sc['form']}), capacity N_f*(δ={sc['delta']}), "
                         f"{int(sc['level'] * 100)}% intervals")]
    out = [f"<h1>Leaderboard: {_e(d.get('title') or suite.name)}</h1>"]
    if suite.retired:
        out.append(f'<p class="note"><strong>Retired</strong>: {_e(suite.retired)}</p>')
    if d.get("description"):
        out.append(f"<p>{_e(str(d['description']).strip())}</p>")
    out.append('<dl class="suite">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items)
               + "</dl>")
    return out


def _table(suite: Suite, rows: list[dict]) -> list[str]:
    """The ranked table; each cell keeps its number in data-sort for the script."""
    head, body = table(suite, rows)
    numeric = [any(cells[j][1] is not None for cells in body) or key == "rank"
               for j, (key, _) in enumerate(head)]
    ths = []
    for (key, label), num in zip(head, numeric):
        kind = 'data-type="num"' if num else 'data-type="text" class="text"'
        ths.append(f'<th scope="col" data-key="{_e(key)}" {kind}><button type="button">'
                   f"{_e(label)}</button></th>")
    trs = []
    for r, cells in zip(rows, body):
        tds = []
        for (text, value), num in zip(cells, numeric):
            if num:
                sort = "" if value is None else ("Infinity" if value == math.inf else repr(float(value)))
                tds.append(f'<td data-sort="{sort}">{_e(text)}</td>')
            else:
                tds.append(f'<td class="text">{_e(text)}</td>')
        trs.append(f'<tr data-file="{_e(r["file"])}">' + "".join(tds) + "</tr>")
    if not rows:
        trs.append(f'<tr><td class="text" colspan="{len(head)}">no submissions yet</td></tr>')
    note = RANKING_NOTE.replace("`", "").replace("**", "")  # markdown marks, not text
    return ['<h2 id="ranking">Ranking</h2>', f'<p class="note">{_e(note)}</p>',
            '<div class="table-wrap"><table id="board">',
            "<thead><tr>" + "".join(ths) + "</tr></thead>",
            "<tbody>" + "\n".join(trs) + "</tbody></table></div>",
            '<p class="hint">Click a column header to sort; <code>index.html#sort=per_kbit&amp;dir=desc'
            "</code> opens the page sorted (keys: "
            + _e(", ".join(k for k, _ in head)) + ").</p>"]


def _figure(png: bytes | None) -> list[str]:
    if png is None:
        img = '<p class="note">The figure was not rendered (<code>--no-plot</code>).</p>'
    else:
        img = (f'<img id="plot" alt="test accuracy against state size, one panel per N_f, '
               f'under the Fano bound" src="data:image/png;base64,{base64.b64encode(png).decode()}">')
    return ['<h2 id="figure">Accuracy against state size</h2>', "<figure>", img,
            f'<figcaption>One panel per N_f; one line per model through its budgets; the shaded '
            f'region above the dashed Fano bound (Lem 4.5) is impossible. Also as '
            f'<a href="{_href(PLOT)}">{_e(PLOT)}</a>.</figcaption>', "</figure>"]


def _per_nf(budgets: list[Mapping], key: str) -> str:
    """The distinct values of a point field, per budget and N_f; "—" when no point has it."""
    parts = []
    for b in budgets:
        by: dict[int, list[str]] = {}
        for p in b["points"]:
            if p.get(key) is not None:
                values = by.setdefault(p["num_facts"], [])
                text = _lr_search(p[key]) if key == "lr_search" else plain(p[key])
                if text not in values:
                    values.append(text)
        parts += [f"{b['name']} N_f={nf}: {'; '.join(v[:LIST_LIMIT])}" for nf, v in by.items()]
    return _cut(" · ".join(parts), 4 * TEXT_LIMIT) if parts else MISSING


def _lr_search(entries: Any) -> str:
    """A search's candidates, ``[{lr, val_accuracy, steps, converged, error}, ...]``, in a line."""
    if not (isinstance(entries, list) and all(isinstance(e, dict) for e in entries)):
        return plain(entries)
    texts = [f"lr {plain(e.get('lr'))}: val {plain(e.get('val_accuracy'))}, "
             f"{plain(e.get('steps'))} steps"
             + (", converged" if e.get("converged") is True else "")
             + (f", error {plain(e['error'])}" if e.get("error") else "") for e in entries[:LIST_LIMIT]]
    return _cut(" / ".join(texts), 2 * TEXT_LIMIT)


def _kept_lr(budget: Mapping, nf: int, means: Mapping) -> str:
    """The lr of the best mean at N_f; where each run searched, the seeds' choices."""
    best = max(means, key=means.get)
    if best != "search":
        return f"{best:g}"
    return "/".join(f"{x:g}" for x in sorted({float(p["lr"]) for p in budget["points"]
                                              if p["num_facts"] == nf}))


def _chosen_lrs(budgets: list[Mapping]) -> str:
    """Per budget, the learning rate kept at each N_f (best mean accuracy over seeds, or
    each seed's choice by validation where the runs searched)."""
    parts = []
    for b in budgets:
        chosen = ", ".join(f"N_f={nf}: {_kept_lr(b, nf, m)}" for nf, m in sorted(lr_means(b).items()))
        parts.append(f"{b['name']}: {chosen}")
    return "; ".join(parts)


def _convergence(points: list[Mapping]) -> str:
    flags = [p["converged"] for p in points if p.get("converged") is not None]
    if not flags:
        return MISSING
    return f"{sum(flags)} of {len(flags)} runs converged (stopped at early_stop or on a plateau)"


def _steps(points: list[Mapping]) -> str:
    parts = []
    for key, label in (("steps", "trained"), ("best_step", "best at")):
        vals = [p[key] for p in points if p.get(key) is not None]
        if vals:
            parts.append(f"{label} median {statistics.median(vals):g} (range {min(vals)}–{max(vals)})")
    return "; ".join(parts) or MISSING


def _provenance(sub: Mapping) -> str:
    """The adapter's provenance: the model's own entry, else the points' (distinct)."""
    if sub["model"].get("provenance") is not None:
        return plain(sub["model"]["provenance"])
    found = []
    for b in sub["budgets"]:
        for p in b["points"]:
            if p.get("provenance") is not None and plain(p["provenance"]) not in found:
                found.append(plain(p["provenance"]))
    return _cut(" | ".join(found[:LIST_LIMIT]), 4 * TEXT_LIMIT) if found else MISSING


def _card_items(path: Path, sub: Mapping) -> list[tuple[str, str, str | None]]:
    """(label, text, link or None) of a model card."""
    m, env, budgets = sub["model"], sub["environment"], sub["budgets"]
    lib = m.get("library") or {}
    points = [p for b in budgets for p in b["points"]]
    train = budgets[0]["config"]["train"]
    lrs = sorted({float(p["lr"]) for p in points})
    recipe = (f"max_steps {plain(train.get('max_steps'))}, batch {plain(train.get('batch_size'))}, "
              f"early_stop {plain(train.get('early_stop'))}; lr ∈ {', '.join(f'{x:g}' for x in lrs)}; "
              f"seeds {', '.join(str(s) for s in sorted({p['seed'] for p in points}))}")
    env_text = (f"devices {plain(env.get('devices'))}; threads {plain(env.get('threads'))}; "
                f"{plain(env.get('python_platform'))}; total run time {plain(env.get('wall_s_total'))} s"
                + ("" if env.get("versions_consistent") else "; runs used different library versions"))
    return [("adapter", plain(m["adapter"]), None),
            ("library", " ".join(plain(x) for x in (lib.get("name"), lib.get("version")))
             + (f" ({plain(lib['class'])})" if lib.get("class") else ""), None),
            ("provenance", _provenance(sub), None),
            ("versions", plain(env.get("versions")), None),
            ("environment", env_text, None),
            ("recipe", recipe, None),
            ("chosen lr", _chosen_lrs(budgets), None),
            ("lr search", _per_nf(budgets, "lr_search"), None),
            ("convergence", _convergence(points), None),
            ("steps", _steps(points), None),
            ("steps to", _per_nf(budgets, "steps_to"), None),
            ("created", plain(sub.get("created")), None),
            ("file", f"{SUBMISSIONS_DIR}/{path.name}", _href(SUBMISSIONS_DIR, path.name)),
            ("sha256", plain(sub["sha256"]), None)]


def _card(path: Path, sub: Mapping) -> str:
    m = sub["model"]
    out = [f'<article class="card" id="model-{_e(m["name"])}">', f"<h3>{_e(m['name'])}</h3>"]
    if m.get("description"):
        out.append(f"<p>{_e(plain(m['description']))}</p>")
    url = m.get("url")
    if isinstance(url, str) and re.match(r"https?://", url):
        out.append(f'<p><a href="{_e(url)}" rel="nofollow noopener noreferrer">{_e(plain(url))}</a></p>')
    out.append("<dl>")
    for label, text, link in _card_items(path, sub):
        body = f'<a href="{link}">{_e(text)}</a>' if link else _e(text)
        out.append(f"<dt>{_e(label)}</dt><dd>{body}</dd>")
    return "\n".join(out + ["</dl>", "</article>"])


def _cards(rows: list[dict], subs: list[tuple[Path, Mapping]]) -> list[str]:
    """One card per submission, in rank order of its best row."""
    by_file = {path.name: (path, sub) for path, sub in subs}
    order = list(dict.fromkeys(r["file"] for r in rows))
    cards = [_card(*by_file[f]) for f in order if f in by_file]
    return ['<h2 id="models">Models</h2>',
            '<div class="cards">' + ("\n".join(cards) or "<p>No submissions yet.</p>") + "</div>"]


def page_html(suite: Suite, rows: list[dict], subs: list[tuple[Path, Mapping]],
              png: bytes | None) -> str:
    """The page: intro, ranked table, figure (``png``; None: not rendered), model cards."""
    return document(suite, _intro(suite) + [file_links()] + _table(suite, rows) + _figure(png)
                    + _cards(rows, subs))


def write_page(suite: Suite, rows: list[dict], subs: list[tuple[Path, Mapping]], path: Path,
               png: bytes | None) -> Path:
    path = Path(path)
    path.write_text(page_html(suite, rows, subs, png), encoding="utf-8")
    return path


def stale_page(suite: Suite, rows: list[dict], subs: list[tuple[Path, Mapping]],
               path: Path) -> str | None:
    """Why the page at ``path`` differs from what render would write (the image aside:
    its bytes depend on the plotting library's version), or None when it does not."""
    if not path.is_file():
        return f"{path} is missing"
    want = without_images(page_html(suite, rows, subs, b""))
    have = without_images(path.read_text(encoding="utf-8", errors="replace"))
    return None if have == want else f"{path} is stale"


