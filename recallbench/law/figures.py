"""Figures of a score report (:func:`recallbench.law.scorer.score`), drawn on matplotlib Figures without pyplot (a user's backend is never switched).

They read the JSON-ready report dict only, so a saved ``report.json`` can be drawn again:

* :func:`heatmap_figure`: measured accuracy (best of seeds) over the D–N grid of one
  (N_f, L, Λ) slice, log2 axes, with the law's iso-probability contours p = 0.5 and
  p = 0.99, from the fitted collapse constants (solid) and the paper's (dashed: eq. 19
  with the paper's a);
* :func:`collapse_figure`: accuracy against x = √(Λ·N·D/(a·N_f + Λ·N)) = 1/σ, with the
  fitted curve Φ(x − b), the paper's Φ(x − √(2 log V)) (Rem 4.3) and eq. 19 at the same
  1/σ; left panel x from the fitted a, right panel from the paper's a.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import matplotlib
from matplotlib.figure import Figure
import numpy as np  # noqa: E402
from matplotlib import colors as mcolors  # noqa: E402
from matplotlib import patheffects  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from scipy import special  # noqa: E402

from recallbench.law import declared, theory  # noqa: E402
from recallbench.law.report import ci_text, group_title  # noqa: E402

LEVELS = (0.5, 0.99)  # the iso-probability contours of the heatmaps



def _subplots(*grid, figsize, dpi, **kw):
    """A figure and its axes without pyplot: no global state, the user's backend untouched."""
    fig = Figure(figsize=figsize, dpi=dpi)
    return fig, fig.subplots(*grid, **kw)

def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges around sorted log2 positions (half-way between neighbours)."""
    v = np.asarray(values, float)
    if len(v) == 1:
        return np.array([v[0] - 0.5, v[0] + 0.5])
    mid = (v[1:] + v[:-1]) / 2
    return np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])


def _linear_a(group: Mapping) -> float:
    """The linear reference's a for a group's task family (declared by the task plugin)."""
    return theory.coefficient_a("linear", declared.task_family(group["task"].get("name", "mqar")))


def _law_grid(group: Mapping, which: str, num_facts: float, n_layers: float, vocab_size: float,
              log_n: np.ndarray, log_d: np.ndarray):
    """p over a (log2 D, log2 N) mesh, from the fitted collapse or the paper's constants."""
    nn, dd = np.meshgrid(2.0 ** log_n, 2.0 ** log_d)
    if which == "fit":
        f = (group.get("collapse") or {}).get("best") or {}
        x = theory.inverse_sigma(num_facts, dd, nn, f["a"], n_layers)
        return special.ndtr(np.asarray(x) - f["b"])
    a = group.get("paper_a") or _linear_a(group)
    x = np.asarray(theory.inverse_sigma(num_facts, dd, nn, a, n_layers))
    table = np.linspace(0.0, float(x.max()) + 1e-9, 600)  # p depends on (D, N) through 1/σ only
    return np.interp(x, table, np.asarray(theory.recall_from_inverse_sigma(table, vocab_size, "eq19")))


def heatmap_figure(group: Mapping, num_facts, seq_len, n_layers):
    """The D–N accuracy heatmap of one slice of a group, with iso-probability contours."""
    cells = [c for c in group["cells"] if c["num_facts"] == num_facts and c["seq_len"] == seq_len
             and c["n_layers"] == n_layers and c.get("d_state") is not None]
    ns = np.array(sorted({c["d_state"] for c in cells}), float)
    ds = np.array(sorted({c["d_model"] for c in cells}), float)
    ln, ld = np.log2(ns), np.log2(ds)
    acc = np.full((len(ds), len(ns)), np.nan)
    for c in cells:
        if c.get("best"):
            acc[np.searchsorted(ds, c["d_model"]), np.searchsorted(ns, c["d_state"])] = c["best"]["accuracy"]
    fig, ax = _subplots(figsize=(1.1 * len(ns) + 3.6, 0.8 * len(ds) + 2.6), dpi=110)
    ax.set_facecolor("#dddddd")
    en, ed = _edges(ln), _edges(ld)
    mesh = ax.pcolormesh(en, ed, np.ma.masked_invalid(acc), cmap="viridis", vmin=0.0, vmax=1.0,
                         shading="flat")
    for i, d in enumerate(ld):
        for j, n in enumerate(ln):
            if np.isfinite(acc[i, j]):
                ax.text(n, d, f"{acc[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if acc[i, j] > 0.6 else "white")
    cb = fig.colorbar(mesh, ax=ax, pad=0.02)
    cb.set_label("measured accuracy (best of seeds)")
    vocab = group["task"].get("vocab_size")
    handles = []
    fine_n = np.linspace(en[0], en[-1], 200)
    fine_d = np.linspace(ed[0], ed[-1], 200)
    sources = []
    if (group.get("collapse") or {}).get("best", {}).get("a") is not None:
        f = group["collapse"]["best"]
        sources.append(("fit", "-", "white", f"fitted collapse: a={f['a']:.3g}, b={f['b']:.3g}"))
    if group.get("state") == "fixed" and vocab:
        a = group.get("paper_a")
        label = (f"paper: a={a:.3g}, eq. 19" if a is not None else
                 f"linear reference: a={_linear_a(group):.3g}, eq. 19")
        sources.append(("paper", "--", "#ff7f0e", label))
    for which, ls, color, label in sources:
        p = _law_grid(group, which, num_facts, n_layers, vocab, fine_n, fine_d)
        stroke = [patheffects.withStroke(linewidth=3.6, foreground="black")]
        cs = ax.contour(fine_n, fine_d, p, levels=list(LEVELS), colors=color, linestyles=ls,
                        linewidths=1.8)
        cs.set(path_effects=stroke)
        for text in ax.clabel(cs, fmt={lv: f"p={lv:g}" for lv in LEVELS}, fontsize=7):
            text.set_path_effects([patheffects.withStroke(linewidth=2.0, foreground="black")])
        handles.append(Line2D([], [], color=color, ls=ls, lw=1.8, path_effects=stroke,
                              label=label + ": iso-probability p = 0.5, 0.99"))
    ax.set_xticks(ln, [f"{int(n)}" if n == int(n) else f"{n:g}" for n in ns])
    ax.set_yticks(ld, [f"{int(d)}" if d == int(d) else f"{d:g}" for d in ds])
    ax.set_xlim(en[0], en[-1])
    ax.set_ylim(ed[0], ed[-1])
    ax.set_xlabel("N = d_state, state size per channel (log2 scale)")
    ax.set_ylabel("model width D = d_model (log2 scale)")
    note = "" if group.get("state") == "fixed" else " — state grows with L"
    ax.set_title(f"{group_title(group)}\nN_f={num_facts}, L={seq_len}, Λ={n_layers} layer(s){note}",
                 fontsize=10)
    if handles:
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=8,
                  frameon=False, ncol=1)
    fig.tight_layout()
    return fig


def collapse_figure(group: Mapping):
    """Accuracy against x = 1/σ with the fitted and the paper's curves (best of seeds)."""
    f = group["collapse"]["best"]
    cells = [c for c in group["cells"] if c.get("best") and c.get("d_state") is not None]
    d = np.array([c["d_model"] for c in cells], float)
    n = np.array([c["d_state"] for c in cells], float)
    lam = np.array([c["n_layers"] for c in cells], float)
    nf = np.array([c["num_facts"] for c in cells], float)
    acc = np.array([c["best"]["accuracy"] for c in cells])
    lo = np.array([c["best"]["ci"][0] for c in cells])
    hi = np.array([c["best"]["ci"][1] for c in cells])
    vocab = float(f["vocab_size"])
    panels = [("fitted", f["a"])]
    if f.get("paper_a") is not None:
        panels.append(("paper", f["paper_a"]))
    fig, axes = _subplots(1, len(panels), figsize=(6.0 * len(panels), 4.6), dpi=110,
                             squeeze=False, sharey=True)
    norm = mcolors.Normalize(vmin=np.log2(d.min()) - 0.5, vmax=np.log2(d.max()) + 0.5)
    cmap = matplotlib.colormaps["plasma"]
    for ax, (name, a) in zip(axes[0], panels):
        x = np.asarray(theory.inverse_sigma(nf, d, n, a, lam), float).reshape(-1)
        ax.errorbar(x, acc, yerr=[acc - lo, hi - acc], fmt="none", ecolor="0.6", lw=0.8, zorder=1)
        sc = ax.scatter(x, acc, c=np.log2(d), cmap=cmap, norm=norm, s=18 + 9 * np.log2(n),
                        edgecolors="black", linewidths=0.4, zorder=2)
        grid = np.linspace(0.0, max(x.max() * 1.08, f["b"] + 3.0), 300)
        ax.plot(grid, special.ndtr(grid - f["b"]), color="C0", lw=2,
                label=f"fit: Φ(x − b), b = {f['b']:.3g} {ci_text(f['b_ci'])}")
        ax.plot(grid, special.ndtr(grid - f["paper_b"]), color="C3", lw=1.5, ls="--",
                label=f"paper, Rem 4.3: Φ(x − √(2 log V)), √(2 log V) = {f['paper_b']:.3g}")
        ax.plot(grid, theory.recall_from_inverse_sigma(grid, vocab, "eq19"), color="C2", lw=1.5,
                ls=":", label="paper, eq. 19 at the same 1/σ")
        ax.set_xlabel(f"x = √(ΛND / (a·N_f + ΛN)) = 1/σ, with a = {a:.3g} ({name})")
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlim(0, grid[-1])
        ax.grid(alpha=0.3)
        if name == "fitted":
            ax.set_title(f"fitted a = {a:.3g} {ci_text(f['a_ci'])}", fontsize=10)
        else:
            ax.set_title(f"paper a = {a:.3g} (x from the paper's constant)", fontsize=10)
    axes[0][0].set_ylabel("measured accuracy (best of seeds, 95% CI)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.45, 0.0), ncol=3, fontsize=8,
               frameon=False)
    cb = fig.colorbar(sc, ax=axes[0].tolist(), pad=0.01)
    ticks = np.unique(np.log2(d))
    cb.set_ticks(ticks, labels=[f"{2 ** t:g}" for t in ticks])
    cb.set_label("D = d_model (marker size grows with N)")
    fig.suptitle(f"Collapse: {group_title(group)}", fontsize=11)
    return fig


def exchange_figure(group: Mapping, num_facts, seq_len, d_model):
    """Thm 4.6's exchange: accuracy against N_eff = Λ·N, one line per Λ (best of seeds),
    beside the law at N_eff (eq. 19 with the paper's a, and the fitted collapse).  If Λ
    layers of state N recall like one layer of state Λ·N, the lines lie on one curve."""
    cells = [c for c in group["cells"] if c["num_facts"] == num_facts and c["seq_len"] == seq_len
             and c["d_model"] == d_model and c.get("best") and c.get("d_state") is not None]
    layers = sorted({c["n_layers"] for c in cells})
    fig, ax = _subplots(figsize=(6.4, 4.4), dpi=110)
    n_eff_all = [c["n_layers"] * c["d_state"] for c in cells]
    grid = np.geomspace(min(n_eff_all) / 1.2, max(n_eff_all) * 1.2, 200)
    vocab = group["task"].get("vocab_size")
    a = group.get("paper_a")
    if a is not None and vocab:
        x = np.asarray(theory.inverse_sigma(num_facts, d_model, grid, a, 1), float)
        ax.plot(grid, theory.recall_from_inverse_sigma(x, vocab, "eq19"), color="0.35", ls="--",
                lw=1.5, label=f"paper: eq. 19 at N_eff, a = {a:.3g}")
    f = (group.get("collapse") or {}).get("best") or {}
    if f.get("a") is not None:
        x = np.asarray(theory.inverse_sigma(num_facts, d_model, grid, f["a"], 1), float)
        ax.plot(grid, special.ndtr(x - f["b"]), color="0.1", lw=1.5,
                label=f"fitted collapse at N_eff: a = {f['a']:.3g}, b = {f['b']:.3g}")
    for i, lam in enumerate(layers):
        mine = sorted((c for c in cells if c["n_layers"] == lam), key=lambda c: c["d_state"])
        n_eff = np.array([lam * c["d_state"] for c in mine], float)
        acc = np.array([c["best"]["accuracy"] for c in mine])
        lo = np.array([c["best"]["ci"][0] for c in mine])
        hi = np.array([c["best"]["ci"][1] for c in mine])
        ax.errorbar(n_eff, acc, yerr=[acc - lo, hi - acc], color=f"C{i}", marker="os^Dv<>p"[i % 8],
                    ms=5, lw=1.2, capsize=2, label=f"Λ = {lam} (N = {', '.join(str(c['d_state']) for c in mine)})")
    ax.set_xscale("log", base=2)
    ticks = sorted(set(n_eff_all))
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_xlabel("N_eff = Λ·N (log2 scale)")
    ax.set_ylabel("measured accuracy (best of seeds, 95% CI)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    ax.set_title(f"{group_title(group)}\nN × Λ exchange at D={d_model}, N_f={num_facts}, L={seq_len}: "
                 f"Λ layers vs one layer with N_eff = Λ·N", fontsize=9.5)
    fig.tight_layout()
    return fig


def _save(fig, path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    return str(path)


def write_figures(report: Mapping, out_dir: str | Path) -> list[str]:
    """Every heatmap (one per group and (N_f, L, Λ) slice with ≥ 2 cells), collapse plot,
    and N × Λ exchange plot (one per (N_f, L, D) slice with ≥ 2 values of Λ)."""
    out = Path(out_dir)
    written = []
    for g in report.get("groups", []):
        plotted = [c for c in g["cells"] if c.get("best") and c.get("d_state") is not None
                   and c.get("d_model") is not None]
        slices: dict[tuple, int] = {}  # (N_f, L, Λ) -> cells: one heatmap each
        layers: dict[tuple, set] = {}  # (N_f, L, D) -> values of Λ: one exchange plot each
        for c in plotted:
            key = (c["num_facts"], c["seq_len"], c["n_layers"])
            slices[key] = slices.get(key, 0) + 1
            layers.setdefault((c["num_facts"], c["seq_len"], c["d_model"]), set()).add(c["n_layers"])
        in_order = lambda items: sorted(items, key=lambda t: tuple(x or 0 for x in t[0]))  # noqa: E731
        for (nf, sl, lam), count in in_order(slices.items()):
            if count >= 2:
                fig = heatmap_figure(g, nf, sl, lam)
                written.append(_save(fig, out / f"heatmap_{g['slug']}_nf{nf}_L{sl}_l{lam}.png"))
        for (nf, sl, d), lams in in_order(layers.items()):
            if len(lams) >= 2:
                fig = exchange_figure(g, nf, sl, d)
                written.append(_save(fig, out / f"exchange_{g['slug']}_nf{nf}_L{sl}_d{d}.png"))
        col = (g.get("collapse") or {}).get("best") or {}
        if col.get("a") is not None:
            written.append(_save(collapse_figure(g), out / f"collapse_{g['slug']}.png"))
    return written
