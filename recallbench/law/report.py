"""Render a score report (:func:`recallbench.law.scorer.score`) as markdown tables.

Everything here reads the JSON-ready report dict only, so a saved ``report.json`` can be
rendered again (the columns: docs/theory.md, "Report columns"); the figures are drawn by
:mod:`recallbench.law.figures`.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence


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


def ci_text(ci: Sequence | None, digits: int = 3) -> str:
    if not ci:
        return "–"
    lo, hi = ci
    return f"[{_fmt(lo, digits) if lo is not None else '0'}, {_fmt(hi, digits) if hi is not None else '∞'}]"


def group_title(group: Mapping) -> str:
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

def _header(report: Mapping) -> list[str]:
    """Counts and settings, impossible results, warnings and what the views mean."""
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
              "per-seed standard deviation and the fraction of seeds that converged "
              "(stopped at early_stop or on a plateau, or reached max_steps on one). "
              "**guess**: the task's guess level g, the bag-of-values guess (1/N_f for MQAR "
              "and AR, 1/(N_f·N_k) with N_k repeats of each key); **NO RECALL** (flags): the "
              "accuracy is not above g at 95%, counting sequences, not queries, so the cell "
              "adds nothing to S_eff; every S_eff is fitted with the guess in the law, "
              "p = f + (1 − f)·law with f = φ·g, φ in [0, 1] fitted (docs/theory.md, "
              "\"Guessing\"). "
              "**UNCONVERGED** (flags): the cell's best run hit max_steps while its validation "
              "accuracy was still improving, so its accuracy is a lower bound of the layer's "
              "recall, not its capacity; "
              + ("**--include-unconverged**: such cells are in every fit, at that lower bound "
                 "(a sensitivity check, not the protocol's fit)."
                 if s.get("include_unconverged") else "such cells are left out of every fit."),
              ""]
    return lines


def _cells(g: Mapping) -> list[str]:
    """A group's title line and its table of cells."""
    lines = [f"## {group_title(g)}", ""]
    lines.append(f"Model kind for the law: {g.get('model_kind') or 'none (black box)'}; "
                 f"paper a = {_fmt(g.get('paper_a'))}; state: {g.get('state')}.")
    if g.get("note"):
        lines.append(f"Note: {g['note']}.")
    lines.append("")
    header = ["N_f", "L", "Λ", "D", "N", "S", "best acc [95% CI]", "guess", "top-k", "mean acc ± sd",
              "seeds (conv.)", "theory (paper eq.19 / fit)", "flags"]
    rows = []
    for c in g["cells"]:
        b, m, th = c.get("best"), c.get("mean"), c.get("theory") or {}
        rows.append([
            _fmt(c["num_facts"]), _fmt(c["seq_len"]), _fmt(c["n_layers"]), _fmt(c["d_model"]),
            _fmt(c["d_state"]),
            "grows with L" if c.get("state_size") is None and b else _fmt(c.get("state_size")),
            f"{_acc(b['accuracy'])} {_acc_ci(b['ci'])}" if b else "failed",
            _acc(c.get("guess_level")),
            (f"{_acc(b['accuracy_topk'])} (k={b['top_k']})"
             if b and b.get("accuracy_topk") is not None else "–"),
            f"{_acc(m['accuracy'])} ± {_acc(m['std'])}" if m else "–",
            f"{m['n_seeds']} ({m['converged_rate']:.0%})" if m else f"0/{c['n_failed']}",
            " / ".join(_acc(th.get(k)) for k in ("paper_eq19", "collapse_fit")) if th else "–",
            "; ".join(c.get("flags") or []) or "",
        ])
    return lines + _table(header, rows) + [""]


def _collapse(col: Mapping) -> list[str]:
    """The collapse fit's table, one row per view."""
    lines = ["**Collapse fit** p = Φ(√(Λ·N·D/(a·N_f + Λ·N)) − b), maximum likelihood on "
             "binomial counts:", ""]
    rows = []
    for view in ("best", "mean"):
        f = col.get(view) or {}
        if "error" in f:
            rows.append([view, f"fit failed: {f['error']}", "", "", "", ""])
            continue
        rows.append([f.get("label", view), f"{_fmt(f['a'])} {ci_text(f['a_ci'])}",
                     f"{_fmt(f['b'])} {ci_text(f['b_ci'])}",
                     f"{_fmt(f['paper_a'])} / {_fmt(f['paper_b'])}",
                     f"{_fmt(f['dispersion'], 2)}", f"{f['n_points']}"])
    return lines + _table(["view", "a [95% CI]", "b [95% CI]", "paper a / b = √(2 log V)",
                           "dispersion", "points"], rows) + [""]


def _worst_cells(worst: Sequence[Mapping]) -> str:
    """Cells by |standardized residual|: 'D=64 N=32 N_f=16: −2.09; …' (Λ when not 1)."""
    return "; ".join(f"D={_fmt(w['d_model'])} N={_fmt(w['d_state'])}"
                     + (f" Λ={_fmt(w['n_layers'])}" if w.get("n_layers", 1) != 1 else "")
                     + f" N_f={_fmt(w['num_facts'])}: {w['residual']:+.2f}" for w in worst)


def _extended(ext: Mapping) -> list[str]:
    """The extended law beside the paper's, with the test of f = 0: one table."""
    lines = ["**Extended law (extension, not the paper's law)**: a guessing floor f, "
             "p = f + (1 − f)·Φ(x − b), fitted beside the collapse on the same counts; test "
             "of f = 0 (docs/theory.md, \"The extended law\"):", ""]
    rows = []
    for view in ("best", "mean"):
        e = ext.get(view) or {}
        if "error" in e or not e:
            rows.append([view, f"fit failed: {e.get('error', 'no fit')}"] + [""] * 8)
            continue
        t, phi = e["test"], e["extended"]["dispersion"]
        crit = "qaic" if phi > 1 else "aic"
        for name, m in (("paper", e["paper"]), ("extended", e["extended"])):
            floor = (f"{_fmt(m['floor'])} {ci_text(m['floor_ci'])}" if "floor" in m
                     else "0 (fixed)")
            test = (f"{'F' if t['kind'] == 'F' else 'χ²'}{tuple(t['df'])} = "
                    f"{_fmt(t['statistic'])}, 2Δℓ = {_fmt(t['lr'])}, p = {_fmt(t['p_value'])}"
                    if name == "extended" else "")
            rows.append([e.get("label", view), name, f"{_fmt(m['a'])} {ci_text(m['a_ci'])}",
                         f"{_fmt(m['b'])} {ci_text(m['b_ci'])}", floor, _fmt(m["log_lik"], 6),
                         _fmt(m["dispersion"], 3), f"{crit.upper()} {_fmt(m[crit], 5)}", test,
                         _worst_cells(m["worst"])])
    return lines + _table(["view", "law", "a [95% CI]", "b [95% CI]", "floor f [95% CI]",
                           "log-lik", "dispersion", "AIC (QAIC if φ > 1)", "test of f = 0",
                           "worst cells (standardized residual)"], rows) + [""]


FORM_NAMES = {"eq19": "eq. 19", "eq20": "eq. 20", "rem43": "Rem 4.3"}


def _efficiency(eff: Mapping, paper_a: float | None = None) -> list[str]:
    """The pooled state efficiency S_eff/S, one line."""
    parts = []
    for view in ("best", "mean"):
        e = eff.get(view) or {}
        if "ratio" in e:
            left = (f" ({e['n_no_recall']} cell(s) at the guess level left out)"
                    if e.get("n_no_recall") else "")
            parts.append(f"{view}: {_est(e['ratio'], e['ratio_ci'])} {ci_text(e['ratio_ci'])}"
                         + left)
        elif e.get("no_recall"):
            parts.append(f"{view}: no recall beyond guessing, S_eff/S ≤ "
                         f"{_fmt(e.get('ratio_upper'))}")
    if not parts:
        return []
    lines = ["**State efficiency** S_eff/S pooled over the cells above their guess level "
             "(1 = as good as the simplified linear Mamba of the same state): "
             + "; ".join(parts) + ".", ""]
    law = [(view, eff[view]["law_a"]) for view in ("best", "mean")
           if "law_a" in (eff.get(view) or {})]
    if law:
        form = law[0][1]["form"]
        lines += [f"**The law's own a** ({FORM_NAMES.get(form, form)} with its b set by V, one "
                  "parameter: the same fit, as a = a_linear / (S_eff/S)): "
                  + "; ".join(f"{view}: {_est(m['a'], m['a_ci'])} {ci_text(m['a_ci'])}"
                              for view, m in law)
                  + (f"; paper a = {_fmt(paper_a)}." if paper_a is not None else "."), ""]
    return lines


def _configs(configs: Sequence[Mapping]) -> list[str]:
    """The fitted effective state per model configuration, with capacity and Fano ratio."""
    lines = ["**Fitted effective state** (S_eff: state of the simplified linear Mamba, "
             "a = linear value, that reproduces the accuracies; best of seeds), capacity "
             "N_f*(δ) of that law, the Fano minimum there and b·S / minimum:", ""]
    rows = []
    for cfg in configs:
        e = cfg.get("best") or {}
        if "error" in e:
            continue
        if e.get("no_recall"):
            state = cfg.get("state_size")
            rows.append([_fmt(cfg["d_model"]), _fmt(cfg["d_state"]), _fmt(cfg["n_layers"]),
                         "grows with L" if state is None else _fmt(state),
                         "no recall beyond guessing", f"≤ {_fmt(e.get('s_eff_upper'))}",
                         f"≤ {_fmt(e['ratio_upper'])}" if "ratio_upper" in e else "–",
                         "–", "–", "–"])
            continue
        rows.append([_fmt(cfg["d_model"]), _fmt(cfg["d_state"]), _fmt(cfg["n_layers"]),
                     "grows with L" if cfg.get("state_size") is None else _fmt(cfg["state_size"]),
                     f"{_est(e.get('n_eff'), e.get('n_eff_ci'))} {ci_text(e.get('n_eff_ci'))}",
                     f"{_est(e.get('s_eff'), e.get('s_eff_ci'))} {ci_text(e.get('s_eff_ci'))}",
                     (f"{_est(e.get('ratio'), e.get('ratio_ci'))} {ci_text(e.get('ratio_ci'))}"
                      if "ratio" in e else "–"),
                     _est(e.get("capacity"), e.get("n_eff_ci")),
                     _est(e.get("fano_min_bits"), e.get("n_eff_ci")),
                     _fmt(e.get("bits_ratio"))])
    return lines + _table(["D", "N", "Λ", "S", "N_eff [CI]", "S_eff [CI]", "S_eff/S [CI]",
                           "N_f*(δ)", "Fano min bits", "b·S / Fano min"], rows) + [""]


def render_markdown(report: Mapping, figures: Sequence[str] = ()) -> str:
    """The report as readable markdown: per group, the cells, the fits, the effective state."""
    lines = _header(report)
    for g in report.get("groups", []):
        lines += _cells(g)
        if g.get("collapse"):
            lines += _collapse(g["collapse"])
        if g.get("extended"):
            lines += _extended(g["extended"])
        if g.get("efficiency"):
            lines += _efficiency(g["efficiency"], g.get("paper_a"))
        if g.get("configs"):
            lines += _configs(g["configs"])
        for f in (f for f in figures if g.get("slug", "\0") in f):
            lines += [f"![{Path(f).stem}]({f})", ""]
    return "\n".join(lines) + "\n"
