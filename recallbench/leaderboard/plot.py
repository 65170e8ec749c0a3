"""The leaderboard plot: test accuracy against state size b·S, under the Fano bound.

One dashed curve per N_f is the Fano bound (Lem 4.5; docs/theory.md, 'The law'): an
accuracy p needs b·S >= p·N_f·log2(V/2) − 1 bits, so p <= (b·S + 1) / (N_f·log2(V/2));
the region above it is shaded (impossible).  Each model with a finite state S adds one
marker per (budget, N_f) at x = b·S; models whose state grows with L are named below.
"""
from __future__ import annotations

import math
from pathlib import Path

from recallbench.leaderboard.suite import Suite

MARKERS = "osD^v<>pPX*h"


def _draw_bounds(ax, xs, nfs: list[int], colors: dict, log2vv: float) -> None:
    import numpy as np

    for nf in nfs:
        # Lem 4.5: accuracy p needs b·S >= p·N_f·log2(V/2) − 1, so p <= (b·S + 1)/(N_f·log2 V_v)
        bound = np.minimum(1.0, (xs + 1) / (nf * log2vv))
        ax.plot(xs, bound, color=colors[nf], lw=1.2, ls="--")
        ax.fill_between(xs, bound, 1.0, where=bound < 1.0, color=colors[nf], alpha=0.10, lw=0)


def _draw_points(ax, finite: list[dict], nfs: list[int], colors: dict) -> list[str]:
    """Markers per model (jittered sideways so models do not hide each other); the models."""
    models = sorted({r["model"] for r in finite})
    for mi, name in enumerate(models):
        for r in (r for r in finite if r["model"] == name):
            x = r["state_size"] * r["state_bits"]
            jitter = 1.0 + 0.06 * (mi - (len(models) - 1) / 2)
            for nf in nfs:
                if nf in r["acc"]:
                    ax.scatter([x * jitter], [r["acc"][nf]], color=colors[nf], marker=MARKERS[mi % len(MARKERS)],
                               s=40, edgecolors="black", linewidths=0.5, zorder=3)
    return models


def _label(ax, suite: Suite, nfs: list[int], colors: dict, models: list[str], xlim: tuple) -> None:
    from matplotlib.lines import Line2D

    V = suite.data["task"].get("vocab_size", 2)
    handles = [Line2D([], [], color=colors[nf], ls="--", label=f"Fano bound, N_f={nf}") for nf in nfs]
    handles += [Line2D([], [], color="0.3", marker=MARKERS[i % len(MARKERS)], ls="", label=m)
                for i, m in enumerate(models)]
    ax.set_xscale("log")
    ax.set_xlim(*xlim)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("recurrent state size b·S (bits per sequence; log scale)")
    ax.set_ylabel("test accuracy (top-1, mean over seeds)")
    title = f"{suite.name}: accuracy vs state size ({suite.data['task'].get('name')} V={V}"
    title += f", L={suite.data['task'].get('seq_len')})" if suite.data["task"].get("seq_len") else ")"
    ax.set_title(title)
    ax.legend(handles=handles, fontsize=7, loc="center", ncol=2)  # the empty middle of the plot


def render_plot(suite: Suite, rows: list[dict], path: Path) -> Path:
    """Write the plot of ``rows`` (from ``render.leaderboard_rows``) to ``path`` (PNG)."""
    import matplotlib
    import numpy as np
    from matplotlib.figure import Figure

    nfs = suite.num_facts
    log2vv = math.log2(max(suite.data["task"].get("vocab_size", 2) / 2, 2))
    finite = [r for r in rows if r["state_size"]]
    bits_all = [r["state_size"] * r["state_bits"] for r in finite] or [1024.0]
    xmin = min(1.0, min(bits_all) / 100)
    xmax = max(bits_all) * 10
    fig = Figure(figsize=(8, 5), dpi=110)  # no pyplot: the user's backend is left alone
    ax = fig.subplots()
    cmap = matplotlib.colormaps["viridis"]
    colors = {nf: cmap(i / max(1, len(nfs) - 1)) for i, nf in enumerate(nfs)}
    _draw_bounds(ax, np.logspace(math.log10(xmin), math.log10(xmax), 400), nfs, colors, log2vv)
    models = _draw_points(ax, finite, nfs, colors)
    _label(ax, suite, nfs, colors, models, (xmin, xmax))
    note = ("Dashed: Fano bound (Lem 4.5), accuracy <= (b·S + 1) / (N_f·log2(V/2)); the shaded "
            "region above each curve is impossible for that N_f. Points: one per model and N_f.")
    grows = sorted({r["model"] for r in rows if not r["state_size"]})
    if grows:
        note += f"\nNot shown (state grows with L): {', '.join(grows)}."
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.text(0.01, 0.01, note, fontsize=7, va="bottom", wrap=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    return path
