"""Score result records against the recall law: the report behind ``recallbench score``.

Usage::

    from recallbench.law.scorer import load_records, score, write_report
    records = load_records(["runs/store", "extra.jsonl"])
    report = score(records)                  # a JSON-ready dict
    write_report(report, "out")              # out/report.json, out/report.md, out/figures/*.png

Vocabulary of the report
------------------------
* **group**: one model family on one task family.  Model key: adapter, head_pattern,
  n_heads, d_conv, expand, options (everything but the sizes D, N, Λ).  Task key: the task
  config less ``num_facts`` and ``seq_len`` (so capacity sweeps over N_f, L stay together).
* **cell**: one full (task, model) configuration inside a group: a point of the D–N grid.
* **variant**: a cell's training settings less the seed (and less threads, device,
  progress); runs of one variant that differ only in ``train.seed`` are seeds.
* per cell, two labelled views:
  - ``best``: best of seeds, the paper's convention: the run with the highest accuracy
    over all seeds and variants of the cell (selection biases it upward);
  - ``mean``: mean over seeds, of the variant with the highest mean; its counts are
    pooled over the seeds (the CI is on the pooled counts), with the per-seed standard
    deviation and convergence rate beside it.
  Intervals are Clopper-Pearson 95% (``fit.binomial_interval``).
* per group: the collapse fit (:func:`recallbench.law.fit.fit_collapse`) for the adapters whose
  N and D mean what they mean in the law (``linear-mamba``, ``designed``; any group with
  ``collapse=True``), and the pooled state efficiency S_eff/S; per model configuration
  (D, N, Λ): the fitted effective state S_eff (:func:`recallbench.law.fit.fit_effective_state`),
  the capacity N_f*(δ), the Fano minimum there and b·S / Fano minimum.  A model whose state
  grows with L (``state_size`` null, attention) gets S_eff but no ratios.
* ``impossible``: runs whose accuracy (lower CI bound) needs more bits than the state holds
  (Lem 4.5, :func:`recallbench.law.fit.fano_check`): a leak or a bug, never a win.

Runs with the same ``config_hash`` are counted once (the last record wins, with a warning).
In the JSON, ``null`` in a CI bound means unbounded (0 or infinity); floats are plain.
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

from recallbench.law import fit
from recallbench.law import theory
from recallbench.api.errors import ConfigError

SCHEMA = "recallbench.result/1"
REPORT_SCHEMA = "recallbench.report/1"
MODEL_KEYS = ("adapter", "head_pattern", "n_heads", "d_conv", "expand", "options")
SIZE_KEYS = ("d_model", "d_state", "n_layers")
TASK_SWEEP_KEYS = ("num_facts", "seq_len")
RUNTIME_TRAIN_KEYS = ("seed", "threads", "device", "progress")
COLLAPSE_ADAPTERS = ("linear-mamba", "designed")


class ScoreWarning(UserWarning):
    """Something in the input the scorer skipped or doubts (torn line, duplicate run, ...)."""


# -- loading -------------------------------------------------------------------------

def _read_jsonl(path: Path) -> list[dict]:
    lines = path.read_text(encoding="utf-8").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if i == len(lines) - 1:
                warnings.warn(f"{path}:{i + 1}: skipping a torn last line ({exc.msg})",
                              ScoreWarning, stacklevel=3)
                continue
            raise ConfigError(f"input {path}:{i + 1} is not valid JSON ({exc.msg}); "
                              "only the last line of a store may be torn") from None
    return out


def _read_json(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"input {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list):
        return data
    raise ConfigError(f"input {path} holds a {type(data).__name__}: expected a record or a list of records")


def load_records(paths: Iterable[str | Path] | str | Path) -> list[dict]:
    """Read result records from stores, ``.jsonl`` and ``.json`` files.

    A directory is a result store, read through :mod:`recallbench.runs.store`: all its files
    (``results.jsonl``, ``results.shard-I-of-N.jsonl``) merged to one record per config
    hash, an ok record preferred over failed ones, torn lines skipped with a warning (or,
    without any such file, every ``*.jsonl`` and ``*.json`` directly inside it, in name
    order).  In a ``.jsonl`` file a
    torn last line (a crash mid-write) is skipped with a :class:`ScoreWarning`; a bad line
    elsewhere is a :class:`ConfigError`.  A ``.json`` file holds a record or a list of
    records.  Entries that are not ``recallbench.result/1`` records are skipped with a
    warning.  Records are returned in reading order.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    from recallbench.runs import store as result_store

    files: list[Path | tuple[Path, list[dict]]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            if result_store.is_store(path):  # results.jsonl and/or results.shard-I-of-N.jsonl
                contents = result_store.read_store(
                    path, warn=lambda m: warnings.warn(m, ScoreWarning, stacklevel=4))
                if contents.duplicates:
                    warnings.warn(f"{path}: {contents.duplicates} duplicate records of the same "
                                  "config_hash merged (an ok record kept over failed ones)",
                                  ScoreWarning, stacklevel=2)
                files.append((path, contents.records))
            else:
                found = sorted(p for p in path.iterdir()
                               if p.is_file() and p.suffix in (".jsonl", ".json"))
                if not found:
                    raise ConfigError(f"input {path} is a directory without results.jsonl "
                                      "or any .jsonl/.json file")
                files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(f"input {path} does not exist: expected a result store "
                              "directory, a .jsonl or a .json file")
    records: list[dict] = []
    for f in files:
        if isinstance(f, tuple):
            f, items = f
        else:
            items = _read_jsonl(f) if f.suffix == ".jsonl" else _read_json(f)
        for j, rec in enumerate(items):
            if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
                got = rec.get("schema") if isinstance(rec, dict) else type(rec).__name__
                warnings.warn(f"{f}: skipping entry {j + 1}, not a {SCHEMA} record (schema {got!r})",
                              ScoreWarning, stacklevel=2)
                continue
            records.append(rec)
    return records


# -- keys ---------------------------------------------------------------------------

def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def model_key(record: Mapping) -> dict:
    """The model family of a record: its model config less D, N and Λ."""
    m = record.get("config", {}).get("model", {})
    return {k: m.get(k) for k in MODEL_KEYS}


def task_key(record: Mapping) -> dict:
    """The task family of a record: its task config less num_facts and seq_len."""
    t = record.get("config", {}).get("task", {})
    return {k: v for k, v in sorted(t.items()) if k not in TASK_SWEEP_KEYS}


def group_label(model: Mapping, task: Mapping) -> str:
    """A readable name of a group: adapter, its non-default head/conv/options, task and V."""
    bits = [str(model.get("adapter") or "?")]
    if model.get("head_pattern"):
        bits.append(f"{model['head_pattern']}x{model.get('n_heads')}")
    elif (model.get("n_heads") or 1) > 1:
        bits.append(f"{model['n_heads']} heads")
    if model.get("d_conv") not in (None, 2):
        bits.append(f"conv {model['d_conv']}")
    if model.get("expand") not in (None, 2):
        bits.append(f"expand {model['expand']}")
    if model.get("options"):
        bits.append(",".join(f"{k}={v}" for k, v in sorted(model["options"].items())))
    extra = [f"{k}={v}" for k, v in task.items()
             if k not in ("name", "vocab_size") and v not in (None, 1.0, True)]
    return f"{' '.join(bits)} on {task.get('name')} (V={task.get('vocab_size')}" + \
        "".join(f", {e}" for e in extra) + ")"


def _variant_key(record: Mapping) -> dict:
    t = record.get("config", {}).get("train", {})
    return {k: v for k, v in sorted(t.items()) if k not in RUNTIME_TRAIN_KEYS}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:60]


def _info_bits(rec: Mapping, task: Mapping) -> float:
    if rec.get("info_bits") is not None:
        return float(rec["info_bits"])
    return task["num_facts"] * math.log2(task["vocab_size"] / 2)


# -- JSON hygiene ---------------------------------------------------------------------

def _jsonable(obj: Any) -> Any:
    """Plain JSON: numpy scalars to Python, tuples to lists, inf and nan to null."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if math.isfinite(x) else None
    return obj


# -- per cell -------------------------------------------------------------------------

def best_run(runs: Iterable[Mapping]) -> Mapping:
    """Best of seeds, the paper's convention: the highest accuracy (correct / total), then
    the larger test set, then the lowest seed."""
    return max(runs, key=lambda r: (r["correct"] / r["total"] if r.get("total") else -1,
                                    r.get("total", 0), -int(r.get("seed") or 0)))


def _view(correct, total, level):
    lo, hi = fit.binomial_interval(correct, total, level)
    return [float(lo), float(hi)]


def _cell_summary(runs: list[dict], failed: list[dict], level: float) -> dict:
    first = runs[0] if runs else failed[0]
    cfg = first["config"]
    task, model = cfg["task"], cfg["model"]
    cell: dict[str, Any] = {
        "d_model": model.get("d_model"), "d_state": model.get("d_state"),
        "n_layers": model.get("n_layers", 1), "num_facts": task.get("num_facts"),
        "seq_len": task.get("seq_len"), "vocab_size": task.get("vocab_size"),
        "n_runs": len(runs), "n_failed": len(failed),
        "errors": sorted({str(r.get("error")) for r in failed})[:5],
        "flags": [],
    }
    if not runs:
        cell["flags"].append("all runs failed")
        cell.update(best=None, mean=None, state_size=None, state_bits=None, state_note=None,
                    info_bits=None)
        return cell
    cell["state_size"] = first.get("state_size")
    cell["state_bits"] = first.get("state_bits") or 32
    cell["state_note"] = first.get("state_note")
    cell["info_bits"] = _info_bits(first, task)
    best = best_run(runs)  # best of seeds (and of training variants)
    top_k = best.get("top_k")
    cell["best"] = {
        "label": "best of seeds",
        "accuracy": best["correct"] / best["total"], "ci": _view(best["correct"], best["total"], level),
        "correct": best["correct"], "total": best["total"],
        "accuracy_topk": best.get("accuracy_topk"), "top_k": top_k,
        "topk_ci": (_view(best["correct_topk"], best["total"], level)
                    if best.get("correct_topk") is not None else None),
        "seed": best.get("seed"), "converged": best.get("converged"),
        "steps": best.get("steps"), "variant": _variant_key(best),
    }
    # mean over seeds, of the best variant
    by_variant: dict[str, list[dict]] = {}
    for r in runs:
        by_variant.setdefault(_canon(_variant_key(r)), []).append(r)
    means = []
    for group in by_variant.values():
        accs = np.array([r["correct"] / r["total"] for r in group])
        means.append((float(accs.mean()), group, accs))
    mean_acc, group, accs = max(means, key=lambda t: t[0])
    k = sum(r["correct"] for r in group)
    n = sum(r["total"] for r in group)
    ktop = [r.get("correct_topk") for r in group]
    conv = [bool(r.get("converged")) for r in group]
    cell["mean"] = {
        "label": "mean over seeds",
        "accuracy": mean_acc, "pooled_accuracy": k / n, "ci": _view(k, n, level),
        "std": float(accs.std(ddof=1)) if len(accs) > 1 else 0.0,
        "correct": k, "total": n, "n_seeds": len(group),
        "seeds": sorted(r.get("seed") for r in group),
        "converged_rate": float(np.mean(conv)),
        "accuracy_topk": (sum(ktop) / n) if all(x is not None for x in ktop) else None,
        "variant": _variant_key(group[0]), "n_variants": len(by_variant),
    }
    # Fano (Lem 4.5), on every run of the cell
    cell["fano"] = None
    if cell["state_size"] is not None:
        worst = None
        for r in runs:
            chk = fit.fano_check(r["correct"], r["total"], r["state_size"],
                                 r.get("state_bits") or 32, _info_bits(r, r["config"]["task"]),
                                 level)
            if worst is None or chk.implied_bits - chk.state_bits_total > \
                    worst[1].implied_bits - worst[1].state_bits_total:
                worst = (r, chk)
        r, chk = worst
        cell["fano"] = {"seed": r.get("seed"), "config_hash": r.get("config_hash"),
                        "accuracy_lower": chk.accuracy_lower, "implied_bits": chk.implied_bits,
                        "state_bits_total": chk.state_bits_total, "impossible": chk.impossible}
        if chk.impossible:
            cell["flags"].append("IMPOSSIBLE: beats the Fano bound (Lem 4.5), a leak or a bug")
    if cell["mean"]["converged_rate"] < 1.0:
        cell["flags"].append(f"{cell['mean']['converged_rate']:.0%} of seeds converged")
    if failed:
        cell["flags"].append(f"{len(failed)} failed run(s)")
    return cell


# -- per group ------------------------------------------------------------------------

def _arr(cells, key, view=None):
    if view is None:
        return np.array([c[key] for c in cells], float)
    return np.array([c[view][key] for c in cells], float)


def _effective_state(cells: list[dict], task_name: str, view: str, form: str, delta: float,
                     level: float, scale) -> fit.EffectiveStateFit:
    return fit.fit_effective_state(_arr(cells, "correct", view), _arr(cells, "total", view),
                                   _arr(cells, "d_model"), _arr(cells, "num_facts"),
                                   _arr(cells, "vocab_size"), task=task_name, scale=scale,
                                   form=form, level=level)


def _config_summaries(cells: list[dict], task_name: str, form: str, delta: float,
                      level: float) -> list[dict]:
    """S_eff per model configuration (D, N, Λ), pooled over the cell's tasks (N_f, L)."""
    by_cfg: dict[tuple, list[dict]] = {}
    for c in cells:
        by_cfg.setdefault((c["d_model"], c["d_state"], c["n_layers"]), []).append(c)
    out = []
    for (d, n, lam), group in sorted(by_cfg.items(), key=lambda t: tuple(x or 0 for x in t[0])):
        state = group[0]["state_size"]
        bits = group[0]["state_bits"]
        entry: dict[str, Any] = {"d_model": d, "d_state": n, "n_layers": lam, "state_size": state,
                                 "state_bits": bits, "num_facts": sorted({c["num_facts"] for c in group}),
                                 "n_cells": len(group)}
        for view in ("best", "mean"):
            try:
                f = _effective_state(group, task_name, view, form, delta, level, 1.0)
            except ValueError as exc:
                entry[view] = {"error": str(exc)}
                continue
            s_eff, s_ci = f.state(d)
            cap = fit.capacity_report(d, f.theta, group[0]["vocab_size"], task_name, state, bits,
                                      delta, form)
            ent = {"label": "best of seeds" if view == "best" else "mean over seeds",
                   "n_eff": f.theta, "n_eff_ci": list(f.theta_ci), "s_eff": s_eff,
                   "s_eff_ci": list(s_ci), "dispersion": f.dispersion,
                   "capacity": cap.capacity, "fano_min_bits": cap.fano_min_bits}
            if state is not None:
                ent.update(ratio=s_eff / state, ratio_ci=[x / state for x in s_ci],
                           state_bits_total=cap.state_bits_total, bits_ratio=cap.bits_ratio)
            entry[view] = ent
        out.append(entry)
    return out


def _score_group(gid: str, model: dict, task: dict, cells: list[dict], collapse: bool | str,
                 form: str, delta: float, level: float) -> dict:
    task_name = task.get("name", "mqar")
    adapter = model.get("adapter")
    kind = theory.adapter_kind(adapter) if adapter else None
    try:
        theory.task_family(task_name)
        has_law = True
    except ValueError:
        has_law, kind = False, None
    ok = [c for c in cells if c.get("best")]
    finite = all(c.get("state_size") is not None for c in ok)
    group: dict[str, Any] = {
        "id": gid, "slug": _slug(gid)[:40] + "-" + hashlib.sha1(gid.encode()).hexdigest()[:6],
        "model": model, "task": task, "model_kind": kind,
        "state": "fixed" if finite else "grows with L",
        "paper_a": theory.coefficient_a(kind, task_name) if kind else None,
        "cells": cells, "collapse": None, "efficiency": None, "configs": [],
    }
    if not ok:
        return group
    if not has_law:
        group["note"] = f"task {task_name!r} has no law: accuracies only"
        return group
    group["configs"] = _config_summaries(ok, task_name, form, delta, level)
    if finite:
        scale = _arr(ok, "state_size") / (2.0 * _arr(ok, "d_model"))
        group["efficiency"] = {}
        for view in ("best", "mean"):
            try:
                f = _effective_state(ok, task_name, view, form, delta, level, scale)
                group["efficiency"][view] = {
                    "label": "best of seeds" if view == "best" else "mean over seeds",
                    "ratio": f.theta, "ratio_ci": list(f.theta_ci), "dispersion": f.dispersion,
                    "definition": "S_eff/S pooled over all cells: N_eff,i = ratio * S_i / (2 D_i)"}
            except ValueError as exc:
                group["efficiency"][view] = {"error": str(exc)}
    do_collapse = (adapter in COLLAPSE_ADAPTERS) if collapse == "auto" else bool(collapse)
    if do_collapse:
        group["collapse"] = {}
        for view in ("best", "mean"):
            try:
                f = fit.fit_collapse(_arr(ok, "correct", view), _arr(ok, "total", view),
                                     _arr(ok, "d_model"), _arr(ok, "d_state"), _arr(ok, "num_facts"),
                                     _arr(ok, "vocab_size"), _arr(ok, "n_layers"), task=task_name,
                                     model_kind=kind, level=level)
                d = f.to_dict()
                d["label"] = "best of seeds" if view == "best" else "mean over seeds"
                group["collapse"][view] = d
            except ValueError as exc:
                group["collapse"][view] = {"error": str(exc)}
    # theory beside each cell
    best_fit = (group["collapse"] or {}).get("best") or {}
    for c in ok:
        pred: dict[str, Any] = {}
        if kind:
            a = group["paper_a"]
            pred["paper_eq19"] = theory.recall_probability(c["vocab_size"], c["num_facts"],
                                                           c["d_model"], c["d_state"], a,
                                                           c["n_layers"], "eq19")
            pred["paper_rem43"] = theory.recall_probability(c["vocab_size"], c["num_facts"],
                                                            c["d_model"], c["d_state"], a,
                                                            c["n_layers"], "rem43")
        if "a" in best_fit:
            x = fit.collapse_x(c["d_model"], c["d_state"], c["num_facts"], best_fit["a"], c["n_layers"])
            pred["collapse_fit"] = fit.collapse_recall(x, best_fit["b"])
        c["theory"] = pred
    return group


def score(records: Iterable[Mapping], *, collapse: bool | str = "auto", form: str = "eq19",
          delta: float = 0.01, level: float = 0.95) -> dict:
    """The report of a list of result records, as a JSON-ready dict.

    ``collapse``: ``"auto"`` fits the collapse for ``linear-mamba`` and ``designed``
    groups, ``True`` for every group, ``False`` for none.  ``form`` is the law the
    fitted effective state uses (eq. 19 by default); ``delta`` the failure rate of the
    capacity N_f*(δ); ``level`` the confidence level of every interval.
    """
    theory._check_form(form)
    records = list(records)
    report_warnings: list[str] = []

    def warn(msg):
        report_warnings.append(msg)
        warnings.warn(msg, ScoreWarning, stacklevel=3)

    # de-duplicate runs (same config hash: the same run stored twice); keep the last
    seen: dict[str, int] = {}
    unique: list[Mapping] = []
    for rec in records:
        if "config" not in rec:
            warn(f"skipping a record without a config (seed {rec.get('seed')!r})")
            continue
        h = rec.get("config_hash") or hashlib.sha256(_canon(rec["config"]).encode()).hexdigest()
        if h in seen:
            warn(f"run {h[:12]} appears more than once; keeping the last record")
            unique[seen[h]] = rec
        else:
            seen[h] = len(unique)
            unique.append(rec)
    groups: dict[str, dict] = {}
    for rec in unique:
        mk, tk = model_key(rec), task_key(rec)
        gkey = _canon({"model": mk, "task": tk})
        g = groups.setdefault(gkey, {"model": mk, "task": tk, "cells": {}})
        if rec.get("correct") is None and rec.get("accuracy") is not None and rec.get("total"):
            rec = {**rec, "correct": int(round(rec["accuracy"] * rec["total"]))}
        cfg = rec["config"]
        ck = _canon({"task": cfg.get("task"), "model": cfg.get("model")})
        cell = g["cells"].setdefault(ck, {"ok": [], "failed": []})
        usable = rec.get("status") == "ok" and rec.get("total")
        (cell["ok"] if usable else cell["failed"]).append(rec)
    out_groups = []
    labels = [group_label(g["model"], g["task"]) for g in groups.values()]
    for (gkey, g), label in zip(groups.items(), labels):
        gid = label if labels.count(label) == 1 else f"{label} #{hashlib.sha1(gkey.encode()).hexdigest()[:6]}"
        cells = [_cell_summary(c["ok"], c["failed"], level) for c in g["cells"].values()]
        cells.sort(key=lambda c: tuple(c.get(k) or 0 for k in
                                       ("num_facts", "seq_len", "n_layers", "d_model", "d_state")))
        out_groups.append(_score_group(gid, g["model"], g["task"], cells, collapse, form, delta, level))
    impossible = []
    for g in out_groups:
        for c in g["cells"]:
            if c.get("fano") and c["fano"]["impossible"]:
                item = {"group": g["id"], "d_model": c["d_model"], "d_state": c["d_state"],
                        "n_layers": c["n_layers"], "num_facts": c["num_facts"], **c["fano"]}
                impossible.append(item)
                warn(f"IMPOSSIBLE result in {g['id']}: D={c['d_model']} N={c['d_state']} "
                     f"N_f={c['num_facts']}: accuracy >= {c['fano']['accuracy_lower']:.4f} needs "
                     f"{c['fano']['implied_bits']:.0f} bits, the state holds "
                     f"{c['fano']['state_bits_total']:.0f} (Lem 4.5): a leak or a bug")
    n_ok = sum(1 for r in unique if r.get("status") == "ok" and r.get("total"))
    report = {
        "schema": REPORT_SCHEMA,
        "settings": {"collapse": collapse, "form": form, "delta": delta, "level": level,
                     "interval": "Clopper-Pearson", "fit_ci": "profile likelihood, quasi-binomial"},
        "n_records": len(records), "n_runs": len(unique), "n_ok": n_ok,
        "n_failed": len(unique) - n_ok,
        "impossible": impossible, "warnings": report_warnings, "groups": out_groups,
    }
    return _jsonable(report)


def write_report(report: Mapping, out_dir: str | Path, figures: bool = True) -> dict[str, Any]:
    """Write ``report.json``, ``report.md`` and (with ``figures``) ``figures/*.png``.

    Returns the paths written: ``{"json": ..., "markdown": ..., "figures": [...]}``.
    """
    from recallbench.law import report as render

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Any] = {"figures": []}
    if figures:
        written["figures"] = render.write_figures(report, out / "figures")
    json_path = out / "report.json"
    json_path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    md_path = out / "report.md"
    md_path.write_text(render.render_markdown(report, [Path(p).relative_to(out).as_posix()
                                                        for p in written["figures"]]),
                       encoding="utf-8")
    written["json"], written["markdown"] = str(json_path), str(md_path)
    return written
