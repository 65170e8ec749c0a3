"""A capacity suite's ``suite.yaml`` checks: MQAR at one V, L = 4·N_f, no grid, and the
search's settings (method 1: max_cells, cpu_budget_min, max_step, fit_budget; method 2:
:func:`recallbench.leaderboard.capacity.method2.check_suite_keys`)."""
from __future__ import annotations

from typing import Mapping

from recallbench.leaderboard.checks import is_count, is_int, is_num, need, short
from recallbench.runs.capacity import MAX_STEP_RANGE


CAPACITY_KEYS = {"max_cells": (1, 64), "cpu_budget_min": (0.1, 7 * 24 * 60),
                 "max_step": MAX_STEP_RANGE}


CAPACITY_FLAGS = {"fit_budget"}  # true or false


def check_capacity(data: Mapping, task: Mapping, where: str) -> None:
    """A capacity suite: MQAR at a V, L = 4·N_f, no grid, the search's settings."""
    cap = data["capacity"]
    keys = set(CAPACITY_KEYS) | CAPACITY_FLAGS
    method = cap.get("method", 1) if isinstance(cap, dict) else 1
    need(method in (1, 2) and is_int(method), where,
         f"capacity.method = {short(method)} is not allowed: 1 or 2 (1 when absent)")
    if method == 2:
        from recallbench.leaderboard.capacity.method2 import check_suite_keys

        check_suite_keys(cap, data, where)
    else:
        need(isinstance(cap, dict) and set(cap) - {"method"} <= keys, where,
             f"capacity must be a mapping of {', '.join(sorted(keys))}")
    for k, (lo, hi) in ({} if method == 2 else CAPACITY_KEYS).items():
        v = cap.get(k)
        need(v is None or (is_num(v) and lo <= v <= hi and (k != "max_cells" or is_int(v))),
             where, f"capacity.{k} = {short(v)} is not allowed: a number in [{lo:g}, {hi:g}]")
    for k in () if method == 2 else CAPACITY_FLAGS:
        need(cap.get(k) is None or isinstance(cap[k], bool), where,
             f"capacity.{k} = {short(cap.get(k))} is not allowed: true or false")
    need("num_facts" not in data, where, "a capacity suite has no num_facts: its search "
         "places them")
    need(task.get("name") == "mqar", where, "a capacity suite measures MQAR: task.name must be mqar")
    need(is_count(task.get("vocab_size"), 8), where, "task.vocab_size must be an integer >= 8")
    need(data.get("seq_len_per_fact") == 4 and "seq_len" not in task, where,
         "a capacity suite needs seq_len_per_fact: 4 (L = 4·N_f) and no task.seq_len")
