"""Render a capacity card (:mod:`recallbench.law.card`) as Markdown and as a PNG figure.

Everything reads the JSON-ready card only, so a saved ``card.json`` renders again.  A value
that is a bound is printed with ≥ or ≤ and never as a measurement; "no recall" cards print
S_eff = 0 with its upper bound.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np


def num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    x = float(x)
    if math.isinf(x):
        return "∞"
    if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def interval(ci) -> str:
    if not ci:
        return "–"
    lo, hi = ci
    return f"[{num(lo)}, {'∞' if hi is None else num(hi)}]"


def estimate(entry: Mapping | None, bound: str | None = None) -> str:
    """A value with its interval, or the bound it is: ≥ lower end, ≤ upper end."""
    if not entry:
        return "–"
    ci = entry.get("ci")
    if bound == "lower" and ci:
        return f"≥ {num(ci[0])} (a lower bound)"
    if bound == "upper" and ci:
        return f"≤ {'∞' if ci[1] is None else num(ci[1])} (an upper bound)"
    if entry.get("value") is None:
        return f"unbounded above {interval(ci)}" if ci and ci[0] is not None else "–"
    return f"{num(entry['value'])} {interval(ci)}"


def headline(card: Mapping) -> str:
    """One line: the model, its state and what the card says of it."""
    m = card["model"]
    name = f"{m.get('adapter')} D={m.get('d_model')} N={m.get('d_state')}"
    if (m.get("n_layers") or 1) > 1:
        name += f" Λ={m['n_layers']}"
    state = card.get("state_size")
    bound = (card.get("s_eff") or {}).get("bound")
    if card.get("status") == "no recall":
        return (f"{name}: no recall beyond guessing; S_eff "
                f"{estimate(card['s_eff'], 'upper')}")
    tail = "" if card.get("status") == "measured" else f" — BOUND: {card.get('why')}"
    ratio = card.get("ratio")
    return (f"{name}, S = {num(state) if state else 'grows with L'}: S_eff "
            f"{estimate(card.get('s_eff'), bound)}"
            + (f", S_eff/S {estimate(ratio, bound)}" if ratio else "") + tail)


def _cells_table(card: Mapping) -> list[str]:
    rows = ["| N_f | L | V | accuracy [95%] | guess | recall | steps | converged | extended | "
            "lr | seeds (failures) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in card["cells"]:
        acc = "failed" if c.get("accuracy") is None else \
            f"{c['accuracy']:.4f} [{c['ci'][0]:.4f}, {c['ci'][1]:.4f}]"
        rows.append("| " + " | ".join([
            str(c["num_facts"]), str(c.get("seq_len")), str(c.get("vocab_size")), acc,
            num(c.get("guess")), "yes" if c.get("recall") else "NO",
            "–" if c.get("steps") is None else str(int(c["steps"])), "yes" if c.get("converged") else "no (cap: a lower bound)",
            str(c.get("extended") or 0), num(c.get("lr")),
            f"{c['seeds']} ({c.get('optimisation_failures', 0)})"]) + " |")
    return rows


def render_markdown(card: Mapping, figure: str | None = None) -> str:
    """The card as Markdown: the headline, the numbers, the cells, the provenance."""
    s_bound = (card.get("s_eff") or {}).get("bound")
    lines = [f"# Capacity card: {card['model'].get('adapter')}", "", f"**{headline(card)}**", ""]
    if figure:
        lines += [f"![capacity card]({figure})", ""]
    cap = card.get("capacity") or {}
    opt = card.get("optimisation_failures") or {}
    rows = [("status", card.get("status") + (f" ({card['why']})" if card.get("why") else "")),
            ("state S (scalars)", num(card.get("state_size")) if card.get("state_size")
             else "grows with L"),
            ("S_eff [95%]", estimate(card.get("s_eff"), s_bound)),
            ("S_eff/S [95%]", estimate(card.get("ratio"), s_bound) if card.get("ratio") else "–")]
    for key, label in (("p50", "N_f* at p = 0.5"), ("p1_delta", f"N_f* at p = 1 − δ, "
                                                              f"δ = {card.get('delta')}")):
        if key in cap:
            rows.append((label, estimate(cap[key], s_bound)))
    if cap.get("per_kbit"):
        rows.append(("N_f*(δ) per kbit of state", estimate(cap["per_kbit"], s_bound)))
    if "fano_ratio" in cap:
        rows.append(("Fano ratio b·S / minimum bits at N_f*(δ)", num(cap.get("fano_ratio"))))
    rows += [("guess share φ (1: guesses among the context's values)",
              num(card.get("guess_share"))),
             ("cells fitted", ", ".join(f"N_f={n}" for n in card.get("fitted_cells") or [])
              or "none"),
             ("optimisation failures", f"{opt.get('count', 0)} of {opt.get('runs', 0)} runs "
                                       "(a seed at the guess while another seed learned)"),
             ("CPU time of the runs", f"{num((card.get('cpu_s') or 0) / 60)} min (their wall "
                                      f"time {num((card.get('wall_s') or 0) / 60)} min)")]
    if card.get("stopped"):
        rows.append(("search stopped", card["stopped"]))
    lines += ["| | |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows] + [""]
    lines += ["Cells (best of seeds; a cell cut by the step cap while improving is a lower "
              "bound and stays out of the fit):", ""] + _cells_table(card) + [""]
    prov = card.get("provenance") or {}
    if prov.get("versions"):
        lines += ["Versions: " + ", ".join(f"{k} {v}" for k, v in prov["versions"].items()), ""]
    return "\n".join(lines) + "\n"


def draw(card: Mapping, path: str | Path, ax=None) -> Path | None:
    """Accuracy against N_f with intervals, the fitted curve, the guess level and the
    Fano bound on N_f; to ``path`` (PNG), or into ``ax`` when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from recallbench.law import theory

    cells = [c for c in card["cells"] if c.get("accuracy") is not None]
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(5.2, 3.6), dpi=110)
    nf = np.array([c["num_facts"] for c in cells], float)
    if len(nf):
        acc = np.array([c["accuracy"] for c in cells])
        lo = np.array([c["ci"][0] for c in cells])
        hi = np.array([c["ci"][1] for c in cells])
        conv = np.array([bool(c.get("converged")) for c in cells])
        for mask, style, label in ((conv, "o", "cell (best of seeds)"),
                                   (~conv, "^", "cut by the cap (≥)")):
            if mask.any():
                ax.errorbar(nf[mask], acc[mask], yerr=[acc[mask] - lo[mask], hi[mask] - acc[mask]],
                            fmt=style, color="C0" if style == "o" else "C3", ms=5, capsize=2,
                            label=label)
    grid = np.unique(np.geomspace(2, max(8, (nf.max() if len(nf) else 8) * 2), 80).round())
    ax.plot(grid, 1.0 / grid, ":", color="0.4", label="guess level 1/N_f")
    n_eff = (card.get("n_eff") or {}).get("value")
    vocab = max((c["vocab_size"] for c in card["cells"]), default=512)
    if n_eff is not None and math.isfinite(n_eff) and n_eff > 0:
        a = theory.coefficient_a("linear", card.get("family") or "mqar")
        share = card.get("guess_share") or 0.0
        p = np.asarray(theory.recall_probability(vocab, grid, card["model"]["d_model"], n_eff, a))
        ax.plot(grid, share / grid + (1 - share / grid) * p, "-", color="C1",
                label="fitted law" + (" (bound)" if card.get("status") != "measured" else ""))
    state, bits = card.get("state_size"), card.get("state_bits") or 32
    if state:
        fano = theory.fano_max_facts(state, bits, vocab, card.get("delta", 0.01))
        if math.isfinite(fano) and fano <= grid.max() * 4:
            ax.axvline(fano, color="C2", ls="--", label=f"Fano: N_f ≤ {num(fano)} at 1 − δ")
        elif math.isfinite(fano):
            ax.plot([], [], color="C2", ls="--", label=f"Fano: N_f ≤ {num(fano)} at 1 − δ "
                                                        "(off the axis)")
    ax.set_xscale("log")
    from matplotlib.ticker import LogLocator, ScalarFormatter

    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("N_f (L = 4·N_f)")
    ax.set_ylabel("accuracy")
    ax.set_title(headline(card)[:70], fontsize=8)
    ax.legend(fontsize=6, loc="lower left")
    if not own:
        return None
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out
