"""The figure a method-2 board leads with: every card's N50 per kbit of state, with its range.

One panel per budget, one row per card of a fixed state (a state that grows with L has no
per-kbit figure and is left out, as on the table).  A **measured** card is a filled point
with its 95% interval; a **bound** is never drawn as a point: an interval that does not
resolve N50 is a hollow bar, a lower bound an arrow from its floor to the right, an upper
bound (no recall included) an arrow from its ceiling to the left.  Rows run from the highest
point (or floor) down, so the ranking reads from the top.

    png = draw_board(suite, rows, path)   # rows: ``board2.card_rows``
"""
from __future__ import annotations

from pathlib import Path

from recallbench.leaderboard.capacity.board import BOUND, MEASURED, NO_RECALL

FIGURE = "capacity.png"
ALT = ("N50 per kbit of state with 95% intervals for every card of the board, one panel per "
       "budget; measured cards as filled points, bounds as hollow bars and arrows")


def marks(rows: list[dict], budget: str) -> list[dict]:
    """What one panel draws, top row first: label, kind ("measured", "interval", "lower",
    "upper"), value (a measured point) and the range [lo, hi] (None: open)."""
    out = []
    for r in rows:
        if r["budget"] != budget or r["kind"] not in (MEASURED, BOUND, NO_RECALL):
            continue
        e = r["card"].get("n50_per_kbit") or {}
        lo, hi = (list(e.get("ci") or []) + [None, None])[:2]
        if r["kind"] == MEASURED:
            kind = "measured"
        elif r["kind"] == NO_RECALL:
            kind = "upper"
        else:
            kind = (r["card"].get("n50") or {}).get("bound") or "interval"
        if lo is None and hi is None:
            continue
        out.append({"label": r["model"], "kind": kind, "lo": lo, "hi": hi,
                    "value": e.get("value") if kind == "measured" else None})
    key = {"measured": lambda m: m["value"], "interval": lambda m: m["lo"] or 0.0,
           "lower": lambda m: m["lo"] or 0.0, "upper": lambda m: m["hi"] or 0.0}
    out.sort(key=lambda m: (-key[m["kind"]](m), m["label"].casefold()))
    return out


def draw_board(suite, rows: list[dict], path: str | Path) -> Path:
    """Draw :data:`FIGURE`'s panels for ``suite``'s budgets to ``path`` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(b["name"], marks(rows, b["name"])) for b in suite.budgets]
    height = max(2.4, 0.32 * max([len(m) for _, m in panels] + [1]) + 1.4)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), height), squeeze=False)
    for ax, (name, ms) in zip(axes[0], panels):
        _panel(ax, name, ms)
    fig.suptitle(f"{suite.name}: N50 per kbit of state, 95% intervals (bounds hollow or arrows)",
                 fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _panel(ax, name: str, ms: list[dict]) -> None:
    if not ms:
        ax.text(0.5, 0.5, "no cards yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        ax.set_title(name, fontsize=10)
        return
    finite = [x for m in ms for x in (m["lo"], m["hi"], m["value"]) if x]
    left, right = min(finite) / 2, max(finite) * 2
    for i, m in enumerate(ms):
        y = len(ms) - 1 - i
        if m["kind"] == "measured":
            ax.errorbar([m["value"]], [y], xerr=[[m["value"] - m["lo"]], [m["hi"] - m["value"]]],
                        fmt="o", color="C0", capsize=3, ms=5)
        elif m["kind"] == "interval":
            ax.plot([m["lo"], m["hi"] if m["hi"] else right], [y, y], color="C1", lw=2.5,
                    alpha=0.45, solid_capstyle="butt")
            ax.plot([m["lo"], m["hi"] or right], [y, y], "|", color="C1", ms=9)
        else:
            start = m["lo"] if m["kind"] == "lower" else m["hi"]
            end = right if m["kind"] == "lower" else left
            ax.annotate("", xy=(end, y), xytext=(start, y),
                        arrowprops={"arrowstyle": "->", "color": "C3", "lw": 1.5})
    from matplotlib.ticker import FormatStrFormatter, LogLocator

    ax.set_xscale("log")
    ax.set_xlim(left, right)
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(FormatStrFormatter(""))
    ax.set_ylim(-0.7, len(ms) - 0.3)
    ax.set_yticks(range(len(ms)))
    ax.set_yticklabels([m["label"] + ("" if m["kind"] == "measured" else " (bound)")
                        for m in reversed(ms)], fontsize=8)
    ax.set_xlabel("N50 per kbit of state (facts recalled at half above the guess, per 1,000 bits)",
                  fontsize=8)
    ax.set_title(name, fontsize=10)
    ax.grid(axis="x", which="both", alpha=0.25)
