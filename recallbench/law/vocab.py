"""How recall falls with the vocabulary V at a fixed state: the slope of Φ⁻¹(p) against m_V.

Eq. 20 (docs/theory.md, "The law") reads p ≈ Φ(1/σ − m_V), with 1/σ set by the state and
N_f alone and m_V = √(2 log V) − (log log V + log 4π) / (2 √(2 log V)) by the vocabulary
alone.  At fixed (D, N, Λ, N_f, L), Φ⁻¹(p) is therefore a straight line in m_V with slope
−1 and intercept 1/σ.  The paper's large-scale study (trained linear Mamba, D = 150,
N = 75, N_f = L/4) found the line but a steeper slope, 1.18–1.56.

    res = analyse(load_records("docs/results/vl_reduced/store"))
    res["groups"][0]["fits"]["best"]["slope"]   # s in Φ⁻¹(p) = c − s·m_V, with its interval

Groups.  Runs are grouped by everything but V and the seed (task, N_f, L, adapter, D, N,
Λ, training recipe); a group needs cells at three or more V.  Per (group, V) the seeds
give two readings: ``best``, the best of seeds (the paper's convention), and ``pooled``,
the seeds' counts summed.

Cells used.  A cell enters the fit when it shows recall (its accuracy is above the guess
level at 95%, :func:`recallbench.law.guess.judge`, on sequence counts) and is below
:data:`CEILING` (where Φ⁻¹ is set by a handful of errors).  Runs cut by max_steps while
still improving are left out unless ``include_unconverged``; every cell left out is
listed with why.

Fit.  Weighted least squares of z = Φ⁻¹(p) on m_V, each z weighted by the inverse of its
delta-method variance p(1 − p) / (u·φ(z)²) on u sequences (the conservative count, as in
the guess test).  The slope's standard error is scaled by √(χ²/dof) when the scatter
exceeds what the counts allow (quasi-likelihood; dof = cells − 2), and its interval is
Student's t on those dof.  A second fit reads each cell against its guess level g = 1/N_f,
z = Φ⁻¹((p − g)/(1 − g)): the guess-aware law's own reference probability.  The theory's
line, slope 1 and intercept 1/σ with the paper's a for the adapter's kind, is given
beside each group, with eq. 19's own slope over the group's V.  ``common`` fits one slope
to every group at once (best of seeds), each group keeping its own intercept.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
from scipy import special, stats

from recallbench.law import guess, theory
from recallbench.law.cells import RUNTIME_TRAIN_KEYS, unconverged

CEILING = 0.995  # above this, Φ⁻¹(p) rests on a handful of errors
MIN_VOCABS = 3
#: the paper's measured range of the slope (large-scale study, trained linear Mamba)
PAPER_SLOPE = (1.18, 1.56)


def _group_key(cfg: Mapping) -> str:
    task = {k: v for k, v in cfg.get("task", {}).items() if k != "vocab_size"}
    train = {k: v for k, v in cfg.get("train", {}).items() if k not in RUNTIME_TRAIN_KEYS}
    return json.dumps({"task": task, "model": cfg.get("model", {}), "train": train}, sort_keys=True)


def _z(p: float) -> float:
    return float(special.ndtri(p))


def _cell(runs: list[Mapping], facts) -> dict:
    """One (group, V) cell: its best-of-seeds and pooled readings and whether it is usable."""
    accs = [r["correct"] / r["total"] for r in runs]
    best = runs[int(np.argmax(accs))]
    k, n = sum(r["correct"] for r in runs), sum(r["total"] for r in runs)
    cell = {"seeds": len(runs), "accuracies": [round(a, 6) for a in accs],
            "best": {"correct": best["correct"], "total": best["total"]},
            "pooled": {"correct": k, "total": n}}
    if facts is None:
        cell["why_left_out"] = "the task is not registered here (no guess level)"
        return cell
    g, per_sequence = facts
    cell["guess"] = g
    for name, draws in (("best", len(runs)), ("pooled", 1)):
        c = cell[name]
        recall, lower, u = guess.judge(c["correct"], c["total"], facts, draws=draws)
        c.update(accuracy=c["correct"] / c["total"], units=u, recall=recall)
    if not cell["pooled"]["recall"]:
        cell["why_left_out"] = f"no recall: not above the guess level {g:.4g} at 95%"
    elif cell["best"]["accuracy"] >= CEILING:  # the best seed: pooled counts never exceed it
        cell["why_left_out"] = f"at the ceiling (accuracy >= {CEILING})"
    return cell


def _wls(m, z, var, level: float, group=None) -> dict:
    """z = c_g − s·m by weighted least squares, one intercept c_g per ``group`` label (one
    in all by default); s, the intercepts and s's interval at ``level``."""
    m, z, w = np.asarray(m, float), np.asarray(z, float), 1.0 / np.asarray(var, float)
    labels = np.zeros(len(m), int) if group is None else np.asarray(group)
    names = sorted(set(labels.tolist()))
    X = np.stack([*(labels == g for g in names), -m], axis=1).astype(float)
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    beta = cov @ X.T @ (w * z)
    resid = z - X @ beta
    dof = len(m) - X.shape[1]
    chi2 = float(np.sum(w * resid ** 2))
    scale = max(1.0, chi2 / dof) if dof > 0 else math.inf
    s, se = float(beta[-1]), math.sqrt(cov[-1, -1] * scale)
    t = float(stats.t.ppf(0.5 + level / 2, dof)) if dof > 0 else math.inf
    out = {"slope": s, "slope_ci": [s - t * se, s + t * se], "slope_se": se,
           "cells": len(m), "chi2_per_dof": chi2 / dof if dof > 0 else None}
    if group is None:
        out["intercept"] = float(beta[0])
    else:
        out["intercepts"] = {str(g): float(b) for g, b in zip(names, beta[:-1])}
    return out


def _points(cells: list[dict], which: str, guess_aware: bool):
    """(m_V, z, var(z)) of the cells a fit uses."""
    m, z, var = [], [], []
    for c in cells:
        r = c[which]
        p, u = r["accuracy"], r["units"]
        if guess_aware:
            g = c["guess"]
            p, scale = (p - g) / (1.0 - g), 1.0 / (1.0 - g)
        else:
            scale = 1.0
        if not 0.0 < p < 1.0:
            continue
        zi = _z(p)
        var.append(scale ** 2 * r["accuracy"] * (1 - r["accuracy"]) / (u * stats.norm.pdf(zi) ** 2))
        m.append(c["m_v"])
        z.append(zi)
    return m, z, var


def _fit(cells: list[dict], which: str, guess_aware: bool, level: float) -> dict | None:
    m, z, var = _points(cells, which, guess_aware)
    return _wls(m, z, var, level) if len(m) >= MIN_VOCABS else None


def _common(groups: list[dict], level: float) -> dict | None:
    """One slope for every group with a fit (best of seeds), each group its own intercept."""
    m, z, var, label = [], [], [], []
    for i, g in enumerate(groups):
        if g["fits"]["best"] is None:
            continue
        used = [c for c in g["cells"] if "why_left_out" not in c]
        gm, gz, gv = _points(used, "best", False)
        m += gm
        z += gz
        var += gv
        label += [i] * len(gm)
    if len(set(label)) < 2:
        return None
    res = _wls(m, z, var, level, group=label)
    res["groups"] = len(set(label))
    return res


def _theory(cfg: Mapping, vocabs: list[int], adapter_kind: str | None,
            family: str | None) -> dict | None:
    """Eq. 20's line (slope 1, intercept 1/σ with the paper's a) and the slope of eq. 19,
    the exact Gaussian model, over the group's own vocabularies (a least-squares line
    through its Φ⁻¹(p) at those V: eq. 20 is its large-V expansion)."""
    model, task = cfg.get("model", {}), cfg.get("task", {})
    try:
        a = theory.coefficient_a(adapter_kind, family)
    except (ValueError, TypeError):
        return None
    inv = float(theory.inverse_sigma(task["num_facts"], model["d_model"], model["d_state"], a,
                                     model.get("n_layers", 1)))
    m = np.asarray(theory.m_v(np.asarray(vocabs, float)), float)
    z = [_z(float(theory.recall_from_inverse_sigma(inv, v, "eq19"))) for v in vocabs]
    slope = -float(np.polyfit(m, z, 1)[0])
    return {"slope": 1.0, "intercept": inv, "a": a, "eq19_slope": slope}


def _kinds(cfg: Mapping) -> tuple[str | None, str | None]:
    from recallbench.api.registry import ADAPTERS, TASKS

    try:
        kind = getattr(ADAPTERS.get(cfg["model"]["adapter"]), "law_kind", None)
        family = getattr(TASKS.get(cfg["task"].get("name", "mqar")), "law_family", None)
    except Exception:  # an adapter or task not registered here: no theory line
        return None, None
    return kind, family


def analyse(records: Iterable[Mapping], level: float = 0.95,
            include_unconverged: bool = False) -> dict:
    """The slope of Φ⁻¹(p) against m_V for every group of runs that spans three or more V."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level = {level} is not allowed: a number in (0, 1)")
    by_group: dict[str, dict[int, dict[str, Mapping]]] = {}
    skipped = {"failed": 0, "unconverged": 0}
    for rec in records:
        if rec.get("status", "ok") != "ok" or not rec.get("total") or "config" not in rec:
            skipped["failed"] += 1
            continue
        if unconverged(rec) and not include_unconverged:
            skipped["unconverged"] += 1
            continue
        cfg = rec["config"]
        v = int(cfg["task"]["vocab_size"])
        by_group.setdefault(_group_key(cfg), {}).setdefault(v, {})[rec.get("config_hash", id(rec))] = rec
    groups = []
    for key, by_v in sorted(by_group.items()):
        if len(by_v) < MIN_VOCABS:
            continue
        cfg = json.loads(key)
        facts = guess.task_facts(cfg["task"])
        cells = []
        for v in sorted(by_v):
            cell = {"vocab_size": v, "m_v": float(theory.m_v(v)), **_cell(list(by_v[v].values()), facts)}
            cells.append(cell)
        used = [c for c in cells if "why_left_out" not in c]
        fits = {f"{which}{'_guess_aware' if ga else ''}": _fit(used, which, ga, level)
                for which in ("best", "pooled") for ga in (False, True)}
        groups.append({"task": cfg["task"], "model": cfg["model"], "train": cfg["train"],
                       "cells": cells, "fits": fits, "theory": _theory(cfg, sorted(by_v), *_kinds(cfg))})
    groups.sort(key=lambda g: (str(g["task"].get("name")), g["task"].get("num_facts", 0),
                               g["task"].get("seq_len", 0), str(g["model"].get("adapter")),
                               g["model"].get("d_model", 0), g["model"].get("d_state", 0)))
    if not groups:
        raise ValueError(f"no group of runs spans {MIN_VOCABS} or more vocabularies at one "
                         "(task, model, recipe): vary task.vocab_size in the sweep")
    slopes = [g["fits"]["best"]["slope"] for g in groups if g["fits"]["best"]]
    return {"groups": groups, "common": _common(groups, level), "skipped": skipped,
            "level": level, "ceiling": CEILING,
            "include_unconverged": include_unconverged, "paper_slope": list(PAPER_SLOPE),
            "slope_range": [min(slopes), max(slopes)] if slopes else None}


def group_title(g: Mapping) -> str:
    """One line naming a group: task, L, N_f, adapter, D, N, Λ."""
    t, m = g["task"], g["model"]
    return (f"{t.get('name', 'mqar')} L = {t.get('seq_len')}, N_f = {t.get('num_facts')}; "
            f"{m.get('adapter')} D = {m.get('d_model')}, N = {m.get('d_state')}, "
            f"Λ = {m.get('n_layers', 1)}")


def write_figure(res: dict, path: Path) -> str:
    """Φ⁻¹(best-of-seeds accuracy) against m_V per group, the fitted lines (solid) and the
    theory's slope-1 lines (dashed); hollow markers are cells left out of the fit."""
    from recallbench.law.figures import _save, _subplots

    fig, ax = _subplots(figsize=(6.4, 4.4), dpi=120)
    for i, g in enumerate(res["groups"]):
        colour = f"C{i % 10}"
        m = np.array([c["m_v"] for c in g["cells"]])
        p = np.clip([max(c["accuracies"]) for c in g["cells"]], 1e-4, 1 - 1e-4)
        used = np.array(["why_left_out" not in c for c in g["cells"]])
        z = special.ndtri(p)
        ax.plot(m[used], z[used], "o", color=colour, label=group_title(g))
        ax.plot(m[~used], z[~used], "o", mfc="none", color=colour)
        grid = np.linspace(m.min(), m.max(), 20)
        f = g["fits"]["best"]
        if f is not None:
            ax.plot(grid, f["intercept"] - f["slope"] * grid, "-", color=colour, lw=1)
        if g["theory"] is not None:
            ax.plot(grid, g["theory"]["intercept"] - grid, "--", color=colour, lw=1, alpha=0.6)
    ax.set_xlabel("m_V (eq. 20)")
    ax.set_ylabel("Φ⁻¹(accuracy), best of seeds")
    ax.set_title("fitted (solid) against the theory's slope 1 (dashed)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)
