"""The scorer's per-cell checks at scale: the Fano check of a cell's runs, made with one
interval call over all of them, picks the same run and the same numbers as checking each
run on its own (``fit.fano_check``)."""
from __future__ import annotations

import numpy as np

from recallbench.law import cells, fit

TASK = {"name": "mqar", "vocab_size": 64, "seq_len": 32, "num_facts": 8}


def _runs(rng, n):
    out = []
    for seed in range(n):
        total = int(rng.integers(1, 400))
        out.append({"correct": int(rng.integers(0, total + 1)), "total": total, "seed": seed,
                    "config_hash": f"{seed:064x}", "state_size": int(rng.integers(1, 40)),
                    "state_bits": [None, 16, 32][seed % 3],
                    "info_bits": None if seed % 2 else float(rng.uniform(1, 200)),
                    "config": {"task": TASK}})
    return out


def _one_by_one(runs, level):
    worst = None
    for r in runs:
        chk = fit.fano_check(r["correct"], r["total"], r["state_size"],
                             r.get("state_bits") or 32,
                             cells._info_bits(r, r["config"]["task"]), level)
        if worst is None or chk.implied_bits - chk.state_bits_total > \
                worst[1].implied_bits - worst[1].state_bits_total:
            worst = (r, chk)
    r, chk = worst
    return {"seed": r["seed"], "config_hash": r["config_hash"],
            "accuracy_lower": chk.accuracy_lower, "implied_bits": chk.implied_bits,
            "state_bits_total": chk.state_bits_total, "impossible": chk.impossible}


def test_the_cell_fano_check_matches_the_per_run_check():
    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 40):
        for level in (0.9, 0.95):
            runs = _runs(rng, n)
            assert cells._worst_fano(runs, level) == _one_by_one(runs, level)
    tie = [{"correct": 3, "total": 4, "seed": s, "config_hash": str(s), "state_size": 1, "state_bits": 1,
            "info_bits": 100.0, "config": {"task": TASK}} for s in range(3)]
    got = cells._worst_fano(tie, 0.95)
    assert got["seed"] == 0 and got["impossible"]  # the first of equals, as before
