"""Score result records against the recall law: the report behind ``recallbench score``.

    from recallbench.law.scorer import load_records, score, write_report
    records = load_records(["runs/store", "extra.jsonl"])
    report = score(records)                  # a JSON-ready dict
    write_report(report, "out")              # out/report.json, out/report.md, out/figures/*.png

Vocabulary (docs/theory.md, "Report columns"): a **group** is one model family (the model config
less D, N, Λ) on one task family (less ``num_facts`` and ``seq_len``); a **cell** one full (task,
model) configuration; a **variant** a cell's training settings less the seed.  Each cell has two
views (:mod:`recallbench.law.cells`): ``best`` of seeds (the paper's convention, biased upward)
and ``mean`` over the seeds of its best variant (pooled counts); intervals are Clopper-Pearson
95%.  Per group: the collapse fit (:func:`recallbench.law.fit.fit_collapse`, for the kinds of
``theory.COLLAPSE_KINDS`` or ``collapse=True``) and its extension (:mod:`recallbench.law.extended`);
per model configuration the effective state S_eff, the capacity N_f*(δ) and b·S over the Fano
minimum there.  ``impossible``: runs that need more bits than the state holds (Lem 4.5): a leak
or a bug.  A cell whose best run is unconverged (cut by ``max_steps`` while improving) is
flagged and left out of every fit unless ``include_unconverged``.  Runs with the same config hash
count once (the last wins, with a warning); a ``null`` CI bound in the JSON means unbounded.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from recallbench.api.canonical import plain
from recallbench.law import declared, extended, fit, guess, theory
from recallbench.law.cells import (Slimmer, best_run, cell_summary, group_label,
                                   group_records, mark_guess, unconverged, unique_runs)
from recallbench.law.records import SCHEMA, ScoreWarning, iter_records, load_records

__all__ = ["SCHEMA", "REPORT_SCHEMA", "ScoreWarning", "load_records", "load_runs", "best_run",
           "score", "write_report"]

REPORT_SCHEMA = "recallbench.report/1"
VIEWS = {"best": "best of seeds", "mean": "mean over seeds"}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:60]


def _arr(cells, key, view=None):
    if view is None:
        return np.array([c[key] for c in cells], float)
    return np.array([c[view][key] for c in cells], float)


def _guesses(cells: list[dict]) -> np.ndarray:
    return np.array([c.get("guess_level") or 0.0 for c in cells], float)


def _effective_state(cells: list[dict], family: str, view: str, form: str, level: float,
                     scale) -> fit.EffectiveStateFit:
    return fit.fit_effective_state(_arr(cells, "correct", view), _arr(cells, "total", view),
                                   _arr(cells, "d_model"), _arr(cells, "num_facts"),
                                   _arr(cells, "vocab_size"), family=family, scale=scale,
                                   form=form, level=level, guess=_guesses(cells))


def _recalling(cells: list[dict], view: str) -> list[dict]:
    """The cells whose ``view`` shows recall above the guess level (the only ones S_eff
    is fitted on); cells of tasks without a declared guess level count as recalling."""
    return [c for c in cells if c[view].get("recall", True)]


def _no_recall(cells: list[dict], family: str, view: str, form: str, level: float,
               scale) -> float:
    """The upper bound of θ that cells showing no recall leave (``guess.no_recall_bound``)."""
    return guess.no_recall_bound(_arr(cells, "correct", view), _arr(cells, "total", view),
                                 _arr(cells, "units", view), _guesses(cells), _arr(cells, "d_model"),
                                 _arr(cells, "num_facts"), _arr(cells, "vocab_size"),
                                 family=family, scale=scale, form=form, level=level)


NO_RECALL = "no recall beyond guessing: no cell is above its guess level at 95%"


def _config_view(group: list[dict], family: str, view: str, form: str, delta: float,
                 level: float) -> dict:
    """S_eff, capacity and Fano ratio of one model configuration, in one view."""
    d, state, bits = group[0]["d_model"], group[0]["state_size"], group[0]["state_bits"]
    cells = _recalling(group, view)
    if not cells:
        try:
            hi = _no_recall(group, family, view, form, level, 1.0) * 2.0 * d
        except ValueError as exc:
            return {"error": str(exc)}
        ent = {"label": VIEWS[view], "no_recall": True, "note": NO_RECALL, "s_eff": None,
               "s_eff_ci": None, "s_eff_upper": hi}
        if state is not None:
            ent["ratio_upper"] = hi / state
        return ent
    try:
        f = _effective_state(cells, family, view, form, level, 1.0)
    except ValueError as exc:
        return {"error": str(exc)}
    s_eff, s_ci = f.state(d)
    cap = fit.capacity_report(d, f.theta, group[0]["vocab_size"], family, state, bits, delta, form)
    ent = {"label": VIEWS[view], "n_eff": f.theta, "n_eff_ci": list(f.theta_ci), "s_eff": s_eff,
           "s_eff_ci": list(s_ci), "dispersion": f.dispersion, "n_cells": len(cells),
           "capacity": cap.capacity, "fano_min_bits": cap.fano_min_bits}
    if state is not None:
        ent.update(ratio=s_eff / state, ratio_ci=[x / state for x in s_ci],
                   state_bits_total=cap.state_bits_total, bits_ratio=cap.bits_ratio)
    return ent


def _config_summaries(cells: list[dict], family: str, form: str, delta: float,
                      level: float) -> list[dict]:
    """S_eff per model configuration (D, N, Λ), pooled over the cell's tasks (N_f, L)."""
    by_cfg: dict[tuple, list[dict]] = {}
    for c in cells:
        by_cfg.setdefault((c["d_model"], c["d_state"], c["n_layers"]), []).append(c)
    out = []
    for (d, n, lam), group in sorted(by_cfg.items(), key=lambda t: tuple(x or 0 for x in t[0])):
        entry: dict[str, Any] = {"d_model": d, "d_state": n, "n_layers": lam,
                                 "state_size": group[0]["state_size"],
                                 "state_bits": group[0]["state_bits"],
                                 "num_facts": sorted({c["num_facts"] for c in group}),
                                 "n_cells": len(group)}
        for view in VIEWS:
            entry[view] = _config_view(group, family, view, form, delta, level)
        out.append(entry)
    return out


def _scale(cells: list[dict]) -> np.ndarray:
    return _arr(cells, "state_size") / (2.0 * _arr(cells, "d_model"))


def _efficiency(ok: list[dict], family: str, form: str, level: float) -> dict:
    """S_eff/S pooled over a group's cells that show recall, per view (no such cell: "no
    recall beyond guessing", with the bound the others leave)."""
    out = {}
    for view in VIEWS:
        cells = _recalling(ok, view)
        try:
            if not cells:
                out[view] = {"label": VIEWS[view], "no_recall": True, "note": NO_RECALL,
                             "ratio_upper": _no_recall(ok, family, view, form, level, _scale(ok))}
                continue
            f = _effective_state(cells, family, view, form, level, _scale(cells))
            out[view] = {
                "label": VIEWS[view],
                "ratio": f.theta, "ratio_ci": list(f.theta_ci), "dispersion": f.dispersion,
                "n_cells": len(cells), "n_no_recall": len(ok) - len(cells),
                "definition": "S_eff/S pooled over the cells above their guess level: "
                              "N_eff,i = ratio * S_i / (2 D_i)"}
        except ValueError as exc:
            out[view] = {"error": str(exc)}
    return out


def _mamba_states(cells: list[dict]) -> bool:
    """Every cell's state is the Mamba layer's, S = Λ·2·D·N, so S_eff/S scales N_eff = Λ·N
    (the law of one head: several heads follow Thm 4.7, not this a)."""
    return all(c["state_size"] == 2 * c["d_model"] * c["d_state"] * c["n_layers"]
               for c in cells)


def _law_a(efficiency: dict, a_linear: float, form: str) -> None:
    """The law's own a beside each view's S_eff/S: with N_eff = θ·Λ·N, the reference's
    1/σ = √(Λ·N·D / ((a_linear/θ)·N_f + Λ·N)), so θ is a one-parameter fit of the law in
    ``form`` (its b set by V, not fitted) with a = a_linear / θ, and its interval maps over."""
    def inv(theta):
        return math.inf if theta == 0 else a_linear / theta

    for e in efficiency.values():
        if "ratio" not in e:
            continue
        lo, hi = e["ratio_ci"]
        e["law_a"] = {"a": inv(e["ratio"]), "a_ci": [inv(hi), inv(lo)], "form": form,
                      "definition": "a of the law in this form with b set by V: a_linear / ratio"}


def _collapse(ok: list[dict], family: str, kind: str | None, level: float) -> dict:
    """The collapse fit of a group, per view."""
    out = {}
    for view in VIEWS:
        try:
            f = fit.fit_collapse(_arr(ok, "correct", view), _arr(ok, "total", view),
                                 _arr(ok, "d_model"), _arr(ok, "d_state"), _arr(ok, "num_facts"),
                                 _arr(ok, "vocab_size"), _arr(ok, "n_layers"), family=family,
                                 model_kind=kind, level=level)
            out[view] = {**f.to_dict(), "label": VIEWS[view]}
        except ValueError as exc:
            out[view] = {"error": str(exc)}
    return out


def _predictions(cell: dict, paper_a: float | None, collapse_fit: Mapping) -> dict:
    """The law beside a cell: the paper's curve (eq. 19, Rem 4.3) and the fitted collapse."""
    pred: dict[str, Any] = {}
    args = (cell["vocab_size"], cell["num_facts"], cell["d_model"], cell["d_state"])
    if paper_a is not None:
        pred["paper_eq19"] = theory.recall_probability(*args, paper_a, cell["n_layers"], "eq19")
        pred["paper_rem43"] = theory.recall_probability(*args, paper_a, cell["n_layers"], "rem43")
    if "a" in collapse_fit:
        x = fit.collapse_x(cell["d_model"], cell["d_state"], cell["num_facts"], collapse_fit["a"],
                           cell["n_layers"])
        pred["collapse_fit"] = fit.collapse_recall(x, collapse_fit["b"])
    return pred


def _score_group(gid: str, model: dict, task: dict, cells: list[dict], collapse: bool | str,
                 form: str, delta: float, level: float, include_unconverged: bool = False) -> dict:
    family = declared.task_family(task.get("name", "mqar"))
    kind = declared.model_kind(model.get("adapter")) if family else None
    ok = [c for c in cells
          if c.get("best") and (include_unconverged or not c.get("best_unconverged"))]
    finite = all(c.get("state_size") is not None for c in ok)
    group: dict[str, Any] = {
        "id": gid, "slug": _slug(gid)[:40] + "-" + hashlib.sha1(gid.encode()).hexdigest()[:6],
        "model": model, "task": task, "model_kind": kind,
        "state": "fixed" if finite else "grows with L",
        "paper_a": theory.coefficient_a(kind, family) if kind else None,
        "cells": cells, "collapse": None, "efficiency": None, "configs": [],
    }
    if not ok:
        return group
    if family is None:
        group["note"] = f"task {task.get('name', 'mqar')!r} has no law: accuracies only"
        return group
    group["configs"] = _config_summaries(ok, family, form, delta, level)
    if finite:
        group["efficiency"] = _efficiency(ok, family, form, level)
        if group["paper_a"] is not None and model.get("n_heads") in (None, 1) \
                and _mamba_states(ok):
            _law_a(group["efficiency"], theory.coefficient_a("linear", family), form)
    if (kind in theory.COLLAPSE_KINDS) if collapse == "auto" else bool(collapse):
        group["collapse"] = _collapse(ok, family, kind, level)
        group["extended"] = extended.group_fits(ok, group["collapse"], level)
    best_fit = (group["collapse"] or {}).get("best") or {}
    for c in ok:
        c["theory"] = _predictions(c, group["paper_a"], best_fit)
    return group


def _mark_unconverged(cell: dict, runs: list[Mapping], included: bool = False) -> dict:
    """``n_unconverged`` and ``best_unconverged`` of a cell, and its flag (``included``: the
    fits take such cells anyway)."""
    cell["n_unconverged"] = sum(unconverged(r) for r in runs)
    cell["best_unconverged"] = bool(runs) and unconverged(best_run(runs))
    if cell["best_unconverged"]:
        cell["flags"].append("UNCONVERGED: the best run hit max_steps while improving (a lower "
                             + ("bound; in the fits by --include-unconverged)" if included
                                else "bound; left out of the fits)"))
    elif cell["n_unconverged"]:
        cell["flags"].append(f"{cell['n_unconverged']} run(s) hit max_steps while improving")
    return cell


def load_runs(paths: Iterable[str | Path] | str | Path) -> list[dict]:
    """What :func:`score` reads of the records :func:`load_records` reads (same order,
    warnings and errors), each read line by line and cut to the fields the scorer uses,
    configs shared per cell (:class:`recallbench.law.cells.Slimmer`): the CLI's path, so a
    million records fit in memory.  ``score(load_runs(p))`` is ``score(load_records(p))``."""
    return list(iter_records(paths, keep=Slimmer()))


def _impossible(groups: list[dict], warn) -> list[dict]:
    """Every cell whose worst run beats the Fano bound, with a warning each."""
    out = []
    for g in groups:
        for c in g["cells"]:
            if not (c.get("fano") and c["fano"]["impossible"]):
                continue
            out.append({"group": g["id"], "d_model": c["d_model"], "d_state": c["d_state"],
                        "n_layers": c["n_layers"], "num_facts": c["num_facts"], **c["fano"]})
            warn(f"IMPOSSIBLE result in {g['id']}: D={c['d_model']} N={c['d_state']} "
                 f"N_f={c['num_facts']}: accuracy >= {c['fano']['accuracy_lower']:.4f} needs "
                 f"{c['fano']['implied_bits']:.0f} bits, the state holds "
                 f"{c['fano']['state_bits_total']:.0f} (Lem 4.5): a leak or a bug")
    return out


def score(records: Iterable[Mapping], *, collapse: bool | str = "auto", form: str = "eq19",
          delta: float = 0.01, level: float = 0.95, include_unconverged: bool = False,
          guess: bool = True) -> dict:
    """The report of a list of result records, as a JSON-ready dict.

    ``collapse``: ``"auto"`` fits the collapse for groups whose adapter declares a law
    kind in ``theory.COLLAPSE_KINDS`` (designed, linear), ``True`` for every group,
    ``False`` for none.  ``form`` is the law the fitted effective state uses (eq. 19 by
    default); ``delta`` the failure rate of the capacity N_f*(δ); ``level`` the confidence
    level of every interval; ``include_unconverged``: fit the cells whose best run the cap
    cut while improving too, at that lower bound (a sensitivity check); ``guess``: judge
    each cell against its task's guess level and fit S_eff with the guess in the law
    (False: the law alone, which credits guessing; the scoring of suites made before the
    guess level, kept so their submissions still verify).
    """
    theory._check_form(form)
    records = list(records)
    report_warnings: list[str] = []

    def warn(msg):
        report_warnings.append(msg)
        warnings.warn(msg, ScoreWarning, stacklevel=3)

    unique = unique_runs(records, warn)
    groups = group_records(unique)
    out_groups = []
    labels = [group_label(g["model"], g["task"]) for g in groups.values()]
    for (gkey, g), label in zip(groups.items(), labels):
        gid = label if labels.count(label) == 1 else f"{label} #{hashlib.sha1(gkey.encode()).hexdigest()[:6]}"
        cells = [_mark_unconverged(cell_summary(c["ok"], c["failed"], level), c["ok"],
                                   include_unconverged) for c in g["cells"].values()]
        if guess:
            cells = [mark_guess(cell, c["ok"], level)
                     for cell, c in zip(cells, g["cells"].values())]
        cells.sort(key=lambda c: tuple(c.get(k) or 0 for k in
                                       ("num_facts", "seq_len", "n_layers", "d_model", "d_state")))
        out_groups.append(_score_group(gid, g["model"], g["task"], cells, collapse, form, delta,
                                       level, include_unconverged))
    impossible = _impossible(out_groups, warn)
    n_ok = sum(1 for r in unique if r.get("status") == "ok" and r.get("total"))
    report = {
        "schema": REPORT_SCHEMA,
        "settings": {"collapse": collapse, "form": form, "delta": delta, "level": level,
                     "include_unconverged": include_unconverged, "guess": guess,
                     "interval": "Clopper-Pearson", "fit_ci": "profile likelihood, quasi-binomial"},
        "n_records": len(records), "n_runs": len(unique), "n_ok": n_ok,
        "n_failed": len(unique) - n_ok,
        "impossible": impossible, "warnings": report_warnings, "groups": out_groups,
    }
    return plain(report)


def write_report(report: Mapping, out_dir: str | Path, figures: bool = True) -> dict[str, Any]:
    """Write ``report.json``, ``report.md`` and (with ``figures``) ``figures/*.png``.

    Returns the paths written: ``{"json": ..., "markdown": ..., "figures": [...]}``.
    """
    from recallbench.law import figures as draw
    from recallbench.law import report as render

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Any] = {"figures": []}
    if figures:
        written["figures"] = draw.write_figures(report, out / "figures")
    json_path = out / "report.json"
    json_path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    md_path = out / "report.md"
    md_path.write_text(render.render_markdown(report, [Path(p).relative_to(out).as_posix()
                                                        for p in written["figures"]]),
                       encoding="utf-8")
    written["json"], written["markdown"] = str(json_path), str(md_path)
    return written
