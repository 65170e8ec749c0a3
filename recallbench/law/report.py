"""Render a score report (:func:`recallbench.law.scorer.score`): markdown tables and figures.

Everything here reads the JSON-ready report dict only, so a saved ``report.json`` can be
rendered again.  Figures (matplotlib, Agg backend):

* :func:`heatmap_figure`: measured accuracy (best of seeds) over the D–N grid of one
  (N_f, L, Λ) slice, log2 axes, with the law's iso-probability contours p = 0.5 and
  p = 0.99, from the fitted collapse constants (solid) and the paper's (dashed: eq. 19
  with the paper's a);
* :func:`collapse_figure`: accuracy against x = √(Λ·N·D/(a·N_f + Λ·N)) = 1/σ, with the
  fitted curve Φ(x − b), the paper's Φ(x − √(2 log V)) (Rem 4.3) and eq. 19 at the same
  1/σ; left panel x from the fitted a, right panel from the paper's a.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import colors as mcolors  # noqa: E402
from matplotlib import patheffects  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from scipy import special  # noqa: E402

from recallbench.law import theory  # noqa: E402

LEVELS = (0.5, 0.99)


# -- small helpers --------------------------------------------------------------------

def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "–"
        if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
            return f"{x:.{digits - 1}e}"
        return f"{x:.{digits}g}" if abs(x) >= 10 else f"{x:.{digits}f}"
    return str(x)


def _ci(ci: Sequence | None, digits: int = 3) -> str:
    if not ci:
        return "–"
    lo, hi = ci
    return f"[{_fmt(lo, digits) if lo is not None else '0'}, {_fmt(hi, digits) if hi is not None else '∞'}]"


def _title(group: Mapping) -> str:
    return group.get("id") or "?"


def _est(x: Any, ci: Sequence | None) -> str:
    """An estimate; null with an unbounded upper CI bound is infinity (all queries right)."""
    if x is None and ci and ci[0] is not None and ci[1] is None:
        return "∞"
    return _fmt(x)


def _acc(x: Any) -> str:
    return "–" if x is None else f"{x:.4f}"


def _acc_ci(ci: Sequence | None) -> str:
    return "–" if not ci else f"[{_acc(ci[0])}, {_acc(ci[1])}]"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


# -- markdown -----------------------------------------------------------------------------

def render_markdown(report: Mapping, figures: Sequence[str] = ()) -> str:
    """The report as readable markdown: per group, the cells, the fits, the effective state."""
    s = report.get("settings", {})
    lines = ["# recallbench score report", ""]
    lines.append(f"{report.get('n_runs', 0)} runs ({report.get('n_ok', 0)} ok, "
                 f"{report.get('n_failed', 0)} failed) in {len(report.get('groups', []))} group(s). "
                 f"Intervals: {s.get('interval', 'Clopper-Pearson')} {s.get('level', 0.95):.0%}; "
                 f"fits: maximum likelihood, CIs by {s.get('fit_ci', 'profile likelihood')}. "
                 f"Effective state from the law in form {s.get('form', 'eq19')}; "
                 f"capacity at δ = {s.get('delta', 0.01)}.")
    lines.append("")
    if report.get("impossible"):
        lines += ["## ⚠ IMPOSSIBLE RESULTS", "",
                  "These runs recall more than their state can hold (Fano, Lem 4.5): the answer "
                  "leaks past the state, or there is a bug. They are not wins.", ""]
        lines += _table(["group", "D", "N", "Λ", "N_f", "seed", "acc ≥", "bits needed", "b·S"],
                        [[i["group"], _fmt(i["d_model"]), _fmt(i["d_state"]), _fmt(i["n_layers"]),
                          _fmt(i["num_facts"]), _fmt(i.get("seed")), _fmt(i["accuracy_lower"], 4),
                          _fmt(i["implied_bits"]), _fmt(i["state_bits_total"])]
                         for i in report["impossible"]])
        lines.append("")
    if report.get("warnings"):
        lines += ["## Warnings", ""] + [f"- {w}" for w in report["warnings"]] + [""]
    lines += ["Views: **best** = best of seeds (the paper's convention, biased upward by "
              "selection); **mean** = mean over seeds of the best training setting, with the "
              "per-seed standard deviation and the fraction of seeds that converged.", ""]
    for g in report.get("groups", []):
        lines += [f"## {_title(g)}", ""]
        lines.append(f"Model kind for the law: {g.get('model_kind') or 'none (black box)'}; "
                     f"paper a = {_fmt(g.get('paper_a'))}; state: {g.get('state')}.")
        if g.get("note"):
            lines.append(f"Note: {g['note']}.")
        lines.append("")
        header = ["N_f", "L", "Λ", "D", "N", "S", "best acc [95% CI]", "top-k", "mean acc ± sd",
                  "seeds (conv.)", "theory (paper eq.19 / fit)", "flags"]
        rows = []
        for c in g["cells"]:
            b, m, th = c.get("best"), c.get("mean"), c.get("theory") or {}
            rows.append([
                _fmt(c["num_facts"]), _fmt(c["seq_len"]), _fmt(c["n_layers"]), _fmt(c["d_model"]),
                _fmt(c["d_state"]),
                "grows with L" if c.get("state_size") is None and b else _fmt(c.get("state_size")),
                f"{_acc(b['accuracy'])} {_acc_ci(b['ci'])}" if b else "failed",
                (f"{_acc(b['accuracy_topk'])} (k={b['top_k']})"
                 if b and b.get("accuracy_topk") is not None else "–"),
                f"{_acc(m['accuracy'])} ± {_acc(m['std'])}" if m else "–",
                f"{m['n_seeds']} ({m['converged_rate']:.0%})" if m else f"0/{c['n_failed']}",
                " / ".join(_acc(th.get(k)) for k in ("paper_eq19", "collapse_fit")) if th else "–",
                "; ".join(c.get("flags") or []) or "",
            ])
        lines += _table(header, rows) + [""]
        col = g.get("collapse")
        if col:
            lines += ["**Collapse fit** p = Φ(√(Λ·N·D/(a·N_f + Λ·N)) − b), maximum likelihood on "
                      "binomial counts:", ""]
            rows = []
            for view in ("best", "mean"):
                f = col.get(view) or {}
                if "error" in f:
                    rows.append([view, f"fit failed: {f['error']}", "", "", "", ""])
                    continue
                rows.append([f.get("label", view), f"{_fmt(f['a'])} {_ci(f['a_ci'])}",
                             f"{_fmt(f['b'])} {_ci(f['b_ci'])}",
                             f"{_fmt(f['paper_a'])} / {_fmt(f['paper_b'])}",
                             f"{_fmt(f['dispersion'], 2)}", f"{f['n_points']}"])
            lines += _table(["view", "a [95% CI]", "b [95% CI]", "paper a / b = √(2 log V)",
                             "dispersion", "points"], rows) + [""]
        eff = g.get("efficiency")
        if eff:
            parts = []
            for view in ("best", "mean"):
                e = eff.get(view) or {}
                if "ratio" in e:
                    parts.append(f"{view}: {_est(e['ratio'], e['ratio_ci'])} {_ci(e['ratio_ci'])}")
            if parts:
                lines += ["**State efficiency** S_eff/S pooled over all cells "
                          "(1 = as good as the simplified linear Mamba of the same state): "
                          + "; ".join(parts) + ".", ""]
        if g.get("configs"):
            lines += ["**Fitted effective state** (S_eff: state of the simplified linear Mamba, "
                      "a = linear value, that reproduces the accuracies; best of seeds), capacity "
                      "N_f*(δ) of that law, the Fano minimum there and b·S / minimum:", ""]
            rows = []
            for cfg in g["configs"]:
                e = cfg.get("best") or {}
                if "error" in e:
                    continue
                rows.append([_fmt(cfg["d_model"]), _fmt(cfg["d_state"]), _fmt(cfg["n_layers"]),
                             "grows with L" if cfg.get("state_size") is None else _fmt(cfg["state_size"]),
                             f"{_est(e.get('n_eff'), e.get('n_eff_ci'))} {_ci(e.get('n_eff_ci'))}",
                             f"{_est(e.get('s_eff'), e.get('s_eff_ci'))} {_ci(e.get('s_eff_ci'))}",
                             (f"{_est(e.get('ratio'), e.get('ratio_ci'))} {_ci(e.get('ratio_ci'))}"
                              if "ratio" in e else "–"),
                             _est(e.get("capacity"), e.get("n_eff_ci")),
                             _est(e.get("fano_min_bits"), e.get("n_eff_ci")),
                             _fmt(e.get("bits_ratio"))])
            lines += _table(["D", "N", "Λ", "S", "N_eff [CI]", "S_eff [CI]", "S_eff/S [CI]",
                             "N_f*(δ)", "Fano min bits", "b·S / Fano min"], rows) + [""]
        mine = [f for f in figures if g.get("slug", "\0") in f]
        for f in mine:
            lines += [f"![{Path(f).stem}]({f})", ""]
    return "\n".join(lines) + "\n"


# -- figures ------------------------------------------------------------------------------

def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges around sorted log2 positions (half-way between neighbours)."""
    v = np.asarray(values, float)
    if len(v) == 1:
        return np.array([v[0] - 0.5, v[0] + 0.5])
    mid = (v[1:] + v[:-1]) / 2
    return np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])


def _law_grid(group: Mapping, which: str, num_facts: float, n_layers: float, vocab_size: float,
              log_n: np.ndarray, log_d: np.ndarray):
    """p over a (log2 D, log2 N) mesh, from the fitted collapse or the paper's constants."""
    nn, dd = np.meshgrid(2.0 ** log_n, 2.0 ** log_d)
    if which == "fit":
        f = (group.get("collapse") or {}).get("best") or {}
        x = theory.inverse_sigma(num_facts, dd, nn, f["a"], n_layers)
        return special.ndtr(np.asarray(x) - f["b"])
    a = group.get("paper_a") or theory.coefficient_a("linear", group["task"].get("name", "mqar"))
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
    fig, ax = plt.subplots(figsize=(1.1 * len(ns) + 3.6, 0.8 * len(ds) + 2.6), dpi=110)
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
                 f"linear reference: a={theory.coefficient_a('linear', group['task'].get('name', 'mqar')):.3g}, eq. 19")
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
    ax.set_title(f"{_title(group)}\nN_f={num_facts}, L={seq_len}, Λ={n_layers} layer(s){note}",
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
    fig, axes = plt.subplots(1, len(panels), figsize=(6.0 * len(panels), 4.6), dpi=110,
                             squeeze=False, sharey=True)
    norm = mcolors.Normalize(vmin=np.log2(d.min()) - 0.5, vmax=np.log2(d.max()) + 0.5)
    cmap = plt.get_cmap("plasma")
    for ax, (name, a) in zip(axes[0], panels):
        x = np.asarray(theory.inverse_sigma(nf, d, n, a, lam), float).reshape(-1)
        ax.errorbar(x, acc, yerr=[acc - lo, hi - acc], fmt="none", ecolor="0.6", lw=0.8, zorder=1)
        sc = ax.scatter(x, acc, c=np.log2(d), cmap=cmap, norm=norm, s=18 + 9 * np.log2(n),
                        edgecolors="black", linewidths=0.4, zorder=2)
        grid = np.linspace(0.0, max(x.max() * 1.08, f["b"] + 3.0), 300)
        ax.plot(grid, special.ndtr(grid - f["b"]), color="C0", lw=2,
                label=f"fit: Φ(x − b), b = {f['b']:.3g} {_ci(f['b_ci'])}")
        ax.plot(grid, special.ndtr(grid - f["paper_b"]), color="C3", lw=1.5, ls="--",
                label=f"paper, Rem 4.3: Φ(x − √(2 log V)), √(2 log V) = {f['paper_b']:.3g}")
        ax.plot(grid, theory.recall_from_inverse_sigma(grid, vocab, "eq19"), color="C2", lw=1.5,
                ls=":", label="paper, eq. 19 at the same 1/σ")
        ax.set_xlabel(f"x = √(ΛND / (a·N_f + ΛN)) = 1/σ, with a = {a:.3g} ({name})")
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlim(0, grid[-1])
        ax.grid(alpha=0.3)
        if name == "fitted":
            ax.set_title(f"fitted a = {a:.3g} {_ci(f['a_ci'])}", fontsize=10)
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
    fig.suptitle(f"Collapse: {_title(group)}", fontsize=11)
    return fig


def exchange_figure(group: Mapping, num_facts, seq_len, d_model):
    """Thm 4.6's exchange: accuracy against N_eff = Λ·N, one line per Λ (best of seeds),
    beside the law at N_eff (eq. 19 with the paper's a, and the fitted collapse).  If Λ
    layers of state N recall like one layer of state Λ·N, the lines lie on one curve."""
    cells = [c for c in group["cells"] if c["num_facts"] == num_facts and c["seq_len"] == seq_len
             and c["d_model"] == d_model and c.get("best") and c.get("d_state") is not None]
    layers = sorted({c["n_layers"] for c in cells})
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=110)
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
    ax.set_title(f"{_title(group)}\nN × Λ exchange at D={d_model}, N_f={num_facts}, L={seq_len}: "
                 f"Λ layers vs one layer with N_eff = Λ·N", fontsize=9.5)
    fig.tight_layout()
    return fig


def _save(fig, path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
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
