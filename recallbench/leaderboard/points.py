"""A submission's points as run configs, and how they must match the suite.

A submission stores each budget's full ``config`` once and each point's ``delta`` from it
(per section); the point's config is ``merge_config(budget config, delta)``.  Within one
budget only the grid's own keys (N_f, with L in a suite whose L grows with N_f; seed; lr
where the suite has an lr grid) and execution keys may differ: one model config per submission.  A point follows the suite when its config holds every value the
suite fixes for it (:meth:`Suite.fixed_values`).  :func:`point_records` rebuilds result
records from a submission's points, for the scorer of either kind of suite.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Mapping

from recallbench.api.canonical import EXECUTION_KEYS, SECTIONS, plain
from recallbench.api.errors import ConfigError
from recallbench.leaderboard.checks import is_int, is_num, need, short

# what may differ between the points of one budget: the grid's own keys and execution keys
DELTA_ALLOWED = {"task": {"num_facts", "seq_len"}, "model": set(),  # seq_len: suites with L ∝ N_f
                 "train": {"lr", "seed", *EXECUTION_KEYS["train"]}}


def first_mismatch(full: Mapping, fixed: Mapping) -> str | None:
    """None if every value of ``fixed`` equals the one in ``full``; else the first mismatch."""
    for section, values in fixed.items():
        have = full.get(section) or {}
        for k, v in values.items():
            if k not in have:
                return f"{section}.{k} missing"
            hv = have[k]
            same = (math.isclose(hv, v, rel_tol=1e-12, abs_tol=0.0)
                    if is_num(hv) and is_num(v) and not (is_int(hv) and is_int(v)) else hv == v)
            if not same:
                return f"{section}.{k} = {short(hv)}, the suite fixes {short(v)}"
    return None


def config_delta(base: Mapping, cfg: Mapping) -> dict:
    """Per section, the keys of ``cfg`` that differ from ``base`` (none may be missing)."""
    out: dict[str, dict] = {}
    for section in SECTIONS:
        b, c = base.get(section) or {}, cfg.get(section) or {}
        d = {k: v for k, v in c.items() if k not in b or b[k] != v}
        removed = [k for k in b if k not in c]
        if removed:
            raise ConfigError(f"config keys {removed} missing from a record; records of "
                              "different recallbench versions cannot share a submission")
        if d:
            out[section] = d
    return out


def check_delta(delta: Mapping, where: str) -> None:
    for section, values in delta.items():
        extra = sorted(set(values) - DELTA_ALLOWED.get(section, set()))
        need(not extra, where, f"{section}.{extra[0] if extra else ''} differs between the points "
             "of one budget; only N_f (and L), lr and seed may (one model config per submission)")


def merge_config(base: Mapping, delta: Mapping) -> dict:
    """A point's full config: its budget's config updated with its delta, per section."""
    out = copy.deepcopy(dict(base))
    for section, values in (delta or {}).items():
        out[section] = {**(out.get(section) or {}), **values}
    return out


#: the model keys a budget sets; the rest of the model config is the submission's own
BUDGET_SIZE_KEYS = ("d_model", "d_state", "n_layers")


def shared_model_config(model: Mapping) -> dict:
    """A budget's model config less the budget's sizes: what all budgets must share."""
    return {k: v for k, v in model.items() if k not in BUDGET_SIZE_KEYS}


def rounded(x: Any, digits: int = 6) -> Any:
    """:func:`plain` data with every float to ``digits`` significant digits (non-finite: None)."""
    return _round_floats(plain(x), digits)


def _round_floats(x: Any, digits: int) -> Any:
    if isinstance(x, float):
        return float(f"{x:.{digits}g}")
    if isinstance(x, list):
        return [_round_floats(v, digits) for v in x]
    if isinstance(x, dict):
        return {k: _round_floats(v, digits) for k, v in x.items()}
    return x


def point_records(submission: Mapping) -> list[dict]:
    """Minimal result records rebuilt from a submission's counts (for the scorer)."""
    from recallbench.law.scorer import SCHEMA

    out = []
    for b in submission["budgets"]:
        for p in b["points"]:
            cfg = merge_config(b["config"], p.get("delta") or {})
            acc = p["correct"] / p["total"] if p["total"] else 0.0
            out.append({"schema": SCHEMA, "status": "ok", "error": None, "accuracy": acc,
                        "accuracy_topk": (p["correct_topk"] / p["total"]) if p["total"] else 0.0,
                        "top_k": cfg["train"].get("top_k"), "correct": p["correct"],
                        "correct_topk": p["correct_topk"], "total": p["total"],
                        "converged": p.get("converged"), "steps": p.get("steps"),
                        "state_size": b["state_size"], "state_bits": b["state_bits"],
                        "info_bits": p["info_bits"], "seed": p["seed"], "config": cfg,
                        "config_hash": p["config_hash"], "lr": p.get("lr"),
                        "extended": p.get("extended"), "cpu_s": p.get("cpu_s"),
                        "wall_s": p.get("wall_s"),
                        # the scorer judges convergence only where the run did (stop_reason)
                        **({"stop_reason": p["stop_reason"]} if p.get("stop_reason") else {})})
    return out
