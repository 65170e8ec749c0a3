"""The leaderboard figure: test accuracy against state size b·S, under the Fano bound.

One panel per N_f (Zoology's layout): each model with a finite state S is one line through
its budgets, at x = b·S bits; the dashed curve is the Fano bound (Lem 4.5; docs/theory.md,
'The law'): an accuracy p needs b·S >= p·N_f·log2(V/2) − 1 bits, so
p <= (b·S + 1) / (N_f·log2(V/2)), and the region above it is shaded (impossible).  The
bound is drawn across the whole x range, which :func:`x_range` makes cover both the
models and the bound's rise to 1 (the Fano minimum for perfect recall,
N_f·log2(V/2) − 1 bits).  Two legends, outside the panels: the models, and the bound.
Models whose state grows with L are named below.  The same figure is the suite's PNG and
the picture on its page (``page``).
"""
from __future__ import annotations

import io
import math
from pathlib import Path

from recallbench.leaderboard.suite import Suite

MARKERS = "osD^v<>pPX*h"
PANELS_PER_ROW = 4
BOUND_COLOR = "0.25"
IMPOSSIBLE_COLOR = "0.55"


def _log2_values(suite: Suite) -> float:
    """log2(V/2): the bits of one value token (Lem 4.5)."""
    return math.log2(max(suite.data["task"].get("vocab_size", 2) / 2, 2))


def fano_bound(bits, num_facts: int, log2vv: float):
    """The most accuracy b·S = ``bits`` allows at N_f facts (Lem 4.5), at most 1."""
    import numpy as np

    return np.minimum(1.0, (np.asarray(bits, dtype=float) + 1) / (num_facts * log2vv))


def model_bits(rows: list[dict]) -> list[float]:
    """b·S of every row with a finite state."""
    return [r["state_size"] * r["state_bits"] for r in rows if r["state_size"]]


def x_range(suite: Suite, rows: list[dict]) -> tuple[float, float]:
    """A log x range holding every model's b·S (with a margin) and the bound's rise:
    from at most 1 bit to past the largest N_f's Fano minimum for perfect recall."""
    full = max(suite.num_facts) * _log2_values(suite) - 1
    bits = model_bits(rows)
    lo = min([1.0] + [b / 2 for b in bits])
    hi = 2 * max([full] + bits)
    return lo, hi


def _draw_bound(ax, xs, nf: int, log2vv: float) -> None:
    bound = fano_bound(xs, nf, log2vv)
    ax.fill_between(xs, bound, 1.0, color=IMPOSSIBLE_COLOR, alpha=0.25, lw=0)
    ax.plot(xs, bound, color=BOUND_COLOR, lw=1.2, ls="--")
    full = nf * log2vv - 1
    ax.annotate(f"{full:.0f} bits", (full, 1.0), xytext=(-4, -12), textcoords="offset points",
                ha="right", fontsize=7, color=BOUND_COLOR)


def _model_lines(rows: list[dict]) -> dict[str, list[dict]]:
    """{model: its finite-state rows by increasing b·S}, models in rank order."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        if r["state_size"]:
            out.setdefault(r["model"], []).append(r)
    return {m: sorted(rs, key=lambda r: r["state_size"] * r["state_bits"]) for m, rs in out.items()}


def _draw_models(ax, lines: dict[str, list[dict]], nf: int, colors: dict) -> None:
    for i, (model, rs) in enumerate(lines.items()):
        pts = [(r["state_size"] * r["state_bits"], r["acc"][nf]) for r in rs if nf in r["acc"]]
        if pts:
            ax.plot(*zip(*pts), color=colors[model], marker=MARKERS[i % len(MARKERS)], ms=6,
                    mec="black", mew=0.5, lw=1.5, zorder=3, label=model)


def _legends(fig, lines: dict[str, list[dict]], colors: dict, x: float) -> None:
    """Two legends right of the panels (from ``x``, in figure fractions): the models above,
    the bound below."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    models = [Line2D([], [], color=colors[m], marker=MARKERS[i % len(MARKERS)], mec="black",
                     mew=0.5, label=m) for i, m in enumerate(lines)]
    bound = [Line2D([], [], color=BOUND_COLOR, ls="--", label="Fano bound (Lem 4.5)"),
             Patch(color=IMPOSSIBLE_COLOR, alpha=0.25, label="impossible")]
    if models:
        fig.legend(handles=models, title="models", loc="upper left", bbox_to_anchor=(x, 0.9),
                   fontsize=8, title_fontsize=8, frameon=False)
    fig.legend(handles=bound, title="bound", loc="lower left", bbox_to_anchor=(x, 0.2),
               fontsize=8, title_fontsize=8, frameon=False)


def _note(suite: Suite, rows: list[dict]) -> str:
    note = ("Dashed: the Fano bound (Lem 4.5), accuracy <= (b·S + 1) / (N_f·log2(V/2)); the "
            "shaded region above it is impossible; the label is the state needed for perfect "
            "recall. Lines: one per model through its budgets (accuracy: mean over seeds at "
            "the better learning rate).")
    grows = sorted({r["model"] for r in rows if not r["state_size"]})
    if grows:
        note += f"\nNot shown (state grows with L): {', '.join(grows)}."
    return note


def _title(suite: Suite) -> str:
    task = suite.data["task"]
    title = f"{suite.name}: accuracy vs state size ({task.get('name')} V={task.get('vocab_size')}"
    per = suite.data.get("seq_len_per_fact")
    if per:
        return title + f", L={per}·N_f)"
    return title + (f", L={task['seq_len']})" if task.get("seq_len") else ")")


def build_figure(suite: Suite, rows: list[dict]):
    """The figure of ``rows`` (from ``table.leaderboard_rows``): one panel per N_f."""
    import matplotlib
    import numpy as np
    from matplotlib.figure import Figure

    nfs = suite.num_facts
    log2vv = _log2_values(suite)
    lo, hi = x_range(suite, rows)
    xs = np.logspace(math.log10(lo), math.log10(hi), 400)
    nrows = math.ceil(len(nfs) / PANELS_PER_ROW)
    ncols = math.ceil(len(nfs) / nrows)
    width, height = 2.9 * ncols + 2.0, 2.5 * nrows + 1.4
    fig = Figure(figsize=(width, height), dpi=100)  # no pyplot: the user's backend is left alone
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).ravel()
    lines = _model_lines(rows)
    cmap = matplotlib.colormaps["tab10"]
    colors = {m: cmap(i % 10) for i, m in enumerate(lines)}
    for ax, nf in zip(axes, nfs):
        _draw_bound(ax, xs, nf, log2vv)
        _draw_models(ax, lines, nf, colors)
        ax.set_title(f"N_f = {nf}", fontsize=9)
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(0, 1.05)
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[len(nfs):]:
        ax.set_visible(False)
    # margins in inches, so that labels, legends and the note keep their room at any size
    fig.subplots_adjust(left=0.7 / width, right=1 - 1.9 / width, bottom=1.0 / height,
                        top=1 - 0.55 / height, wspace=0.16, hspace=0.3)
    fig.supxlabel("recurrent state size b·S (bits per sequence; log scale)", fontsize=9,
                  y=0.55 / height)
    fig.supylabel("test accuracy (top-1)", fontsize=9, x=0.1 / width)
    fig.suptitle(_title(suite), fontsize=10, y=1 - 0.1 / height, va="top")
    _legends(fig, lines, colors, 1 - 1.8 / width)
    fig.text(0.1 / width, 0.05 / height, _note(suite, rows), fontsize=7, va="bottom", wrap=True)
    return fig


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes (no timestamp or software tag: the same figure, the same bytes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def render_plot(suite: Suite, rows: list[dict], path: Path) -> Path:
    """Write the figure of ``rows`` to ``path`` (PNG)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(build_figure(suite, rows)))
    return path
