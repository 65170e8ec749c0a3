"""Group keys and per-cell summaries of result records (the scorer's vocabulary).

* :func:`model_key` / :func:`task_key`: the model family (config less D, N, Λ) and task
  family (task config less N_f and L) a record belongs to; together they name a group,
  :func:`group_label` reads it.
* :func:`cell_summary`: one cell (one full task and model configuration) over its seeds
  and training variants, as the ``best`` (best of seeds) and ``mean`` (mean over seeds
  of the best variant) views, each with a Clopper-Pearson interval, and the Fano check
  (Lem 4.5) of its worst run;
* :func:`mark_guess`: whether each view of a cell is above its task's guess level, the
  bag-of-values guess (:mod:`recallbench.law.guess`);
* :class:`Slimmer`: a record cut to the fields the scorer reads, its config shared with
  every record of the same config but for the seed (what the scorer holds of each run);
  :func:`unique_runs` and :func:`group_records`: one run per config hash, by group and cell.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np

from recallbench.api.canonical import canonical_json, config_hash
from recallbench.law import fit, guess

MODEL_KEYS = ("adapter", "head_pattern", "n_heads", "d_conv", "expand", "options")
TASK_SWEEP_KEYS = ("num_facts", "seq_len")
RUNTIME_TRAIN_KEYS = ("seed", "threads", "device", "progress")


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


#: the fields of a record the scorer reads (cells, groups, flags, the usable-input check)
RUN_FIELDS = ("status", "error", "config_hash", "correct", "total", "accuracy", "correct_topk",
              "accuracy_topk", "top_k", "seed", "converged", "stop_reason", "steps",
              "state_size", "state_bits", "state_note", "info_bits", "extended", "config")


class Slimmer:
    """``slimmer(record)``: the record less every field the scorer does not read, its config
    less ``train.seed`` (a runtime key: the run's own ``seed`` field says it) and shared
    with the records of the same config but for the seed.  A record without a
    ``config_hash`` keeps its whole config (its hash is made from it)."""

    def __init__(self):
        self.configs: dict[str, dict] = {}

    def __call__(self, record: Mapping) -> dict:
        out = {k: record[k] for k in RUN_FIELDS if k in record}
        cfg = out.get("config")
        train = cfg.get("train") if isinstance(cfg, dict) else None
        if out.get("config_hash") and isinstance(train, dict) and "seed" in train:
            cfg = {**cfg, "train": {k: v for k, v in train.items() if k != "seed"}}
            out["config"] = self.configs.setdefault(repr(cfg), cfg)
        return out


def unique_runs(records: Iterable[Mapping], warn) -> list[Mapping]:
    """One record per config hash (the last one wins); records without a config dropped."""
    seen: dict[str, int] = {}
    unique: list[Mapping] = []
    for rec in records:
        if "config" not in rec:
            warn(f"skipping a record without a config (seed {rec.get('seed')!r})")
            continue
        h = rec.get("config_hash") or config_hash(rec["config"])
        if h in seen:
            warn(f"run {h[:12]} appears more than once; keeping the last record")
            unique[seen[h]] = rec
        else:
            seen[h] = len(unique)
            unique.append(rec)
    return unique


def group_records(unique: list[Mapping]) -> dict[str, dict]:
    """Records by group key, then by cell, split into usable (ok) and failed runs."""
    groups: dict[str, dict] = {}
    keys: dict[int, tuple] = {}  # id(config) -> (group key, model key, task key, cell key)
    for rec in unique:
        cfg = rec["config"]
        if id(cfg) not in keys:
            mk, tk = model_key(rec), task_key(rec)
            keys[id(cfg)] = (canonical_json({"model": mk, "task": tk}), mk, tk,
                             canonical_json({"task": cfg.get("task"), "model": cfg.get("model")}))
        gkey, mk, tk, ck = keys[id(cfg)]
        g = groups.setdefault(gkey, {"model": mk, "task": tk, "cells": {}})
        if rec.get("correct") is None and rec.get("accuracy") is not None and rec.get("total"):
            rec = {**rec, "correct": int(round(rec["accuracy"] * rec["total"]))}
        cell = g["cells"].setdefault(ck, {"ok": [], "failed": []})
        usable = rec.get("status") == "ok" and rec.get("total")
        (cell["ok"] if usable else cell["failed"]).append(rec)
    return groups


def unconverged(rec: Mapping) -> bool:
    """A run cut by max_steps while still improving (a record that judged its convergence,
    i.e. holds ``stop_reason``, with ``converged`` false)."""
    return "stop_reason" in rec and rec.get("converged") is False


def _variant_key(record: Mapping) -> dict:
    t = record.get("config", {}).get("train", {})
    return {k: v for k, v in sorted(t.items()) if k not in RUNTIME_TRAIN_KEYS}


def _info_bits(rec: Mapping, task: Mapping) -> float:
    if rec.get("info_bits") is not None:
        return float(rec["info_bits"])
    return task["num_facts"] * math.log2(task["vocab_size"] / 2)


def best_run(runs: Iterable[Mapping]) -> Mapping:
    """Best of seeds, the paper's convention: the highest accuracy (correct / total), then
    the larger test set, then the lowest seed."""
    return max(runs, key=lambda r: (r["correct"] / r["total"] if r.get("total") else -1,
                                    r.get("total", 0), -int(r.get("seed") or 0)))


def _view(correct, total, level):
    lo, hi = fit.binomial_interval(correct, total, level)
    return [float(lo), float(hi)]


def _best_view(runs: list[dict], level: float) -> dict:
    """Best of seeds (and of training variants)."""
    best = best_run(runs)
    return {
        "label": "best of seeds",
        "accuracy": best["correct"] / best["total"], "ci": _view(best["correct"], best["total"], level),
        "correct": best["correct"], "total": best["total"],
        "accuracy_topk": best.get("accuracy_topk"), "top_k": best.get("top_k"),
        "topk_ci": (_view(best["correct_topk"], best["total"], level)
                    if best.get("correct_topk") is not None else None),
        "seed": best.get("seed"), "converged": best.get("converged"),
        "steps": best.get("steps"), "variant": _variant_key(best),
    }


def _mean_view(runs: list[dict], level: float) -> dict:
    """Mean over seeds, of the training variant with the highest mean; counts pooled."""
    by_variant: dict[str, list[dict]] = {}
    names: dict[int, str] = {}  # id(config) -> its variant's key (configs are shared)
    for r in runs:
        name = names.get(id(r["config"]))
        if name is None:
            name = names[id(r["config"])] = canonical_json(_variant_key(r))
        by_variant.setdefault(name, []).append(r)
    means = []
    for group in by_variant.values():
        accs = np.array([r["correct"] / r["total"] for r in group])
        means.append((float(accs.mean()), group, accs))
    mean_acc, group, accs = max(means, key=lambda t: t[0])
    k = sum(r["correct"] for r in group)
    n = sum(r["total"] for r in group)
    ktop = [r.get("correct_topk") for r in group]
    conv = [bool(r.get("converged")) for r in group]
    return {
        "label": "mean over seeds",
        "accuracy": mean_acc, "pooled_accuracy": k / n, "ci": _view(k, n, level),
        "std": float(accs.std(ddof=1)) if len(accs) > 1 else 0.0,
        "correct": k, "total": n, "n_seeds": len(group),
        "seeds": sorted(r.get("seed") for r in group),
        "converged_rate": float(np.mean(conv)),
        "accuracy_topk": (sum(ktop) / n) if all(x is not None for x in ktop) else None,
        "variant": _variant_key(group[0]), "n_variants": len(by_variant),
    }


def _worst_fano(runs: list[dict], level: float) -> dict:
    """Lem 4.5 on every run of a cell (:func:`recallbench.law.fit.fano_check`, with one
    interval call over all the runs): the run that needs the most bits beyond its state
    (the first such run on a tie)."""
    correct = np.array([r["correct"] for r in runs], float)
    total = np.array([r["total"] for r in runs], float)
    lower = np.atleast_1d(np.asarray(fit.binomial_interval(correct, total, level)[0], float))
    info = np.array([float(_info_bits(r, r["config"]["task"])) for r in runs])
    held = np.array([float(r["state_size"]) * float(r.get("state_bits") or 32) for r in runs])
    implied = lower * info - 1.0
    k = int(np.argmax(implied - held))
    r = runs[k]
    return {"seed": r.get("seed"), "config_hash": r.get("config_hash"),
            "accuracy_lower": float(lower[k]), "implied_bits": float(implied[k]),
            "state_bits_total": float(held[k]), "impossible": bool(implied[k] > held[k])}


def cell_summary(runs: list[dict], failed: list[dict], level: float) -> dict:
    """One cell: its sizes, the ``best`` and ``mean`` views, the Fano check and flags.

    ``runs`` are the cell's usable (ok) records, ``failed`` the others.
    """
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
    cell["best"] = _best_view(runs, level)
    cell["mean"] = _mean_view(runs, level)
    cell["fano"] = None
    if cell["state_size"] is not None:
        cell["fano"] = _worst_fano(runs, level)
        if cell["fano"]["impossible"]:
            cell["flags"].append("IMPOSSIBLE: beats the Fano bound (Lem 4.5), a leak or a bug")
    if cell["mean"]["converged_rate"] < 1.0:
        cell["flags"].append(f"{cell['mean']['converged_rate']:.0%} of seeds converged")
    if failed:
        cell["flags"].append(f"{len(failed)} failed run(s)")
    return cell


def mark_guess(cell: dict, runs: list[Mapping], level: float) -> dict:
    """The cell's guess level (its task's ``guess_level``), its sequence count, and per
    view whether the accuracy is above the guess (``guess.recall_test``: the best of
    seeds at the Šidák level of its number of runs); a cell that is not gets a flag."""
    if not runs or not cell.get("best"):
        return cell
    facts = guess.task_facts(runs[0]["config"]["task"])
    if facts is None:  # a task not registered here: its guess level is unknown
        cell["guess_level"] = None
        return cell
    g = cell["guess_level"] = facts[0]
    for view, draws in (("best", len(runs)), ("mean", 1)):
        v = cell[view]
        recall, lower, v["units"] = guess.judge(v["correct"], v["total"], facts, level, draws)
        v["recall"], v["recall_lower"] = recall, lower
    if not cell["best"]["recall"]:
        cell["flags"].append(f"NO RECALL: not above the guess level {g:.4g} at "
                             f"{level:.0%} (adds nothing to S_eff)")
    return cell
