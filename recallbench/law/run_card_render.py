"""Render a method-2 capacity card (:mod:`recallbench.law.run_card`) as text, Markdown and PNG.

Reads the JSON-ready card only.  The headline is what the cells bracket, N50 and the
S_eff/S anchored there; a bound is printed as ≥ or ≤ with its reason and never as a
measurement; far extrapolations (N_f* at 1 − δ) are not printed; the one-parameter law's
misfit is shown beside the fit; the state's shape stands beside S (:func:`shape_text`).
:func:`cite` is one line a paper can quote.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import numpy as np

from recallbench.law.card_render import interval, num


def layer_name(card: Mapping) -> str:
    """The layer's name: a factory's ``--name``, else its adapter, with D, N and Λ."""
    m = card["model"]
    name = (m.get("options") or {}).get("name") or m.get("adapter")
    text = f"{name} D={m.get('d_model')} N={m.get('d_state')}"
    return text + (f" Λ={m['n_layers']}" if (m.get("n_layers") or 1) > 1 else "")


def shape_text(shape: Mapping | None) -> str:
    """A state shape as "heads 2 × key 4 × value 32" (layers and heads left out at 1); ""
    for none."""
    if not shape:
        return ""
    terms = [f"{k} {v}" for k, v in shape.items() if not (k in ("layers", "heads") and v == 1)]
    return " × ".join(terms) or "1"


def _value(entry: Mapping | None, bound: str | None) -> str:
    if not entry:
        return "–"
    lo, hi = entry.get("ci") or (None, None)
    if bound == "lower":
        return f"≥ {num(lo)} (a lower bound)"
    if bound == "upper":
        return f"≤ {'∞' if hi is None else num(hi)} (an upper bound)"
    if bound == "interval":
        return f"unresolved in {interval(entry.get('ci'))} (not a measurement)"
    return f"{num(entry.get('value'))} {interval(entry.get('ci'))}"


def headline(card: Mapping) -> str:
    """One line: the layer, its state (the card's, else the one a factory was given), and
    what the card says of it."""
    state = card.get("state_size") or ((card.get("model") or {}).get("options") or {}).get(
        "state_size")
    shown = (f"{state:.0f}" if float(state).is_integer() else num(state)) if state else None
    shape = shape_text(card.get("state_shape"))
    name = f"{layer_name(card)}{f' [{shape}]' if shape else ''}, S = {shown or 'grows with L'}"
    status, n50 = card.get("status"), card.get("n50") or {}
    if status == "no recall":
        return f"{name}: {card.get('why')}; N50 {_value(n50, 'upper')}"
    if not n50:
        return f"{name}: BOUND: {card.get('why')}"
    bound = n50.get("bound")
    text = f"{name}: N50 {_value(n50, bound)}"
    ratio = card.get("ratio")
    if ratio:
        text += f", S_eff/S {_value(ratio, bound)}"
    elif not state:
        text += " (no S_eff/S)"
    if status != "measured":
        text += f" — BOUND: {card.get('why')}"
    elif off := outside_text(card):
        text += f" ({off})"
    return text


def cite(card: Mapping, version: str | None = None) -> str:
    """One line a paper can quote: value, interval, budget, protocol, version (this
    installation's recallbench when not given)."""
    if version is None:
        from importlib import metadata

        try:
            version = metadata.version("recallbench")
        except metadata.PackageNotFoundError:
            version = "unknown"
    n50, ratio = card.get("n50") or {}, card.get("ratio") or {}
    what = (f"N50 = {num(n50.get('value'))} {interval(n50.get('ci'))}" if n50.get("value")
            else f"N50 {_value(n50, n50.get('bound'))}")
    if ratio.get("value") is not None and card.get("status") == "measured":
        what += f", S_eff/S = {num(ratio['value'])} {interval(ratio['ci'])}"
    off = outside_text(card)
    what += f"; {off}" if off and card.get("status") == "measured" else ""
    return (f"{layer_name(card)} on MQAR V={card['task'].get('vocab_size')}, L = 4·N_f: {what} "
            f"({card.get('status')}; 95% {_kind_of_interval(n50)} over "
            f"{len(card.get('runs') or [])} runs; {num(card.get('work_mtok'))} of "
            f"{num(card.get('work_budget_mtok'))} Mtok; "
            f"card method 2, recallbench {version})")


SIMULATED_NAMES = {"slope": "slope", "tau": "run SD", "failure_rate": "failure rate"}


def outside_text(card: Mapping) -> str | None:
    """Where the card's fit lies outside the shapes at which its interval's coverage is
    simulated ("coverage not simulated at its fit: slope 0.72 outside [1, 1.9]"); None
    when inside, or when the card has no fit."""
    sim, fit = card.get("simulated") or {}, card.get("fit") or {}
    out = [k for k in sim.get("outside") or [] if k in SIMULATED_NAMES]
    if not out:
        return None
    return "coverage not simulated at its fit: " + ", ".join(
        f"{SIMULATED_NAMES[k]} {num(fit.get(k))} outside [{sim[k][0]:g}, {sim[k][1]:g}]"
        for k in out)


def _simulated_row(card: Mapping) -> str:
    sim = card.get("simulated")
    if not sim:
        return "–"
    return outside_text(card) or ("yes: " + ", ".join(
        f"{SIMULATED_NAMES[k]} in [{sim[k][0]:g}, {sim[k][1]:g}]" for k in SIMULATED_NAMES
        if k in sim))


def _kind_of_interval(n50: Mapping) -> str:
    """How the card's N50 interval was made: the fit's profile interval, widened for the
    search's stop where the card says so."""
    w = n50.get("widening")
    return f"profile interval widened {w:g}-fold" if w and w != 1 else "profile interval"


def _runs_table(card: Mapping) -> list[str]:
    rows = ["| N_f | L | seed | accuracy | guess | run | lr | steps |", "|---|---|---|---|---|---|---|---|"]
    for r in card.get("runs") or []:
        acc = "failed" if r.get("accuracy") is None else f"{r['accuracy']:.4f}"
        rows.append(f"| {r['num_facts']} | {r['seq_len']} | {r['seed']} | {acc} | "
                    f"{num(r.get('guess'))} | {r.get('kind', r.get('error', ''))} | "
                    f"{num(r.get('lr'))} | {r.get('steps')} |")
    return rows


def render_markdown(card: Mapping, figure: str | None = None, version: str | None = None) -> str:
    """card.md: the headline, the fit beside the law, every run, how to cite it."""
    fit, law = card.get("fit") or {}, card.get("law") or {}
    lines = [f"# Capacity card: {layer_name(card)}", "", f"**{headline(card)}**", "",
             f"Status: **{card.get('status')}**" + (f" ({card['why']})" if card.get("why") else "")
             + f"; the search stopped: {card.get('stopped', '–')}.", ""]
    if figure:
        lines += [f"![N50 card of {layer_name(card)}]({figure})", ""]
    state = card.get("state_size")
    lines += ["| quantity | value |", "|---|---|",
              f"| state S (scalars) | {num(state) if state else 'grows with L'} |",
              f"| state shape | {shape_text(card.get('state_shape')) or '–'} |",
              f"| N50 (half the queries above the guess) | {_value(card.get('n50'), (card.get('n50') or {}).get('bound'))} |",
              f"| the fit's own N50 interval (before the widening) | {interval((card.get('n50') or {}).get('fit_ci'))} |",
              f"| S_eff (linear reference with this N50) | {_value(card.get('s_eff'), (card.get('n50') or {}).get('bound'))} |",
              f"| S_eff / S | {_value(card.get('ratio'), (card.get('n50') or {}).get('bound'))} |",
              f"| N50 per kbit of state | {_value(card.get('n50_per_kbit'), (card.get('n50') or {}).get('bound'))} |",
              f"| b·S / Fano minimum at N50 | {num(card.get('fano_ratio'))} |",
              f"| fitted slope in ln N_f (the law's at N50) | {num(fit.get('slope'))} ({num(law.get('slope_at_n50'))}) |",
              f"| run-to-run SD (probit) | {num(fit.get('tau'))} |",
              f"| optimisation failures (fitted rate) | {num(fit.get('failure_rate'))} |",
              f"| the interval's coverage simulated at this fit | {_simulated_row(card)} |",
              f"| one-parameter law: S_eff, dispersion | {_value(law.get('s_eff'), None)}, {num(law.get('dispersion'))} |",
              f"| training work | {num(card.get('work_mtok'))} of {num(card.get('work_budget_mtok'))} Mtok |",
              f"| CPU time (this machine) | {num((card.get('cpu_s') or 0) / 60)} CPU-min |", ""]
    lines += ["## Runs", ""] + _runs_table(card)
    lines += ["", "Cite as:", "", f"> {cite(card, version)}", ""]
    return "\n".join(lines)


def draw(card: Mapping, path: str | Path, ax=None) -> Path | None:
    """Every run's share above the guess against N_f, the fitted probit line, and N50 with
    its interval; the title wraps instead of being cut."""
    import textwrap

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy import special

    runs = [r for r in card.get("runs") or [] if r.get("accuracy") is not None]
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(6.4, 4.6))
    colors = {"observed": "C0", "at the guess": "C3", "at the ceiling": "C2", "cut by the cap": "C1"}
    for kind, color in colors.items():
        xs = [r["num_facts"] for r in runs if r.get("kind") == kind]
        ys = [(r["accuracy"] - r["guess"]) / (1 - r["guess"]) for r in runs if r.get("kind") == kind]
        if xs:
            ax.scatter(xs, ys, s=22, color=color, label=f"run: {kind}", zorder=3)
    n50, fit = card.get("n50") or {}, card.get("fit") or {}
    if n50.get("value") and fit.get("slope") and runs:
        lo = min(r["num_facts"] for r in runs) / 1.5
        hi = max(r["num_facts"] for r in runs) * 1.5
        grid = np.geomspace(lo, hi, 100)
        ax.plot(grid, special.ndtr(fit["slope"] * (math.log(n50["value"]) - np.log(grid))),
                color="k", lw=1.2, label=f"fit: slope {fit['slope']:.2f}, run SD {fit['tau']:.2f}")
        ci = n50.get("ci") or [None, None]
        left = n50["value"] - (ci[0] or 0)
        right = (ci[1] - n50["value"]) if ci[1] is not None else hi - n50["value"]
        ax.errorbar([n50["value"]], [0.5], xerr=[[max(left, 0)], [max(right, 0)]], fmt="D",
                    color="C4", ms=7, capsize=5, lw=2, zorder=4, label="N50, 95% interval")
    ax.axhline(0.5, color="0.7", lw=0.8, ls=":")
    ax.set_xscale("log")
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("facts N_f (L = 4·N_f)")
    ax.set_ylabel("share of queries recalled above the guess")
    ax.set_title("\n".join(textwrap.wrap(headline(card), 80)), fontsize=8)
    ax.legend(fontsize=7, loc="lower left")
    if not own:
        return None
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
