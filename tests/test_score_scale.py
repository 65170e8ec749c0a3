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


def test_the_cli_path_reads_what_load_records_reads(tmp_path):
    """``score(load_runs(p))`` is ``score(load_records(p))``: same runs, order, merges,
    skipped lines and warnings, with one config shared by the seeds of a cell."""
    import json
    import warnings

    from recallbench.api.canonical import config_hash
    from recallbench.api.config import resolve
    from recallbench.law import scorer

    def rec(seed, facts, status="ok", correct=5):
        cfg = resolve({"task": {**TASK, "num_facts": facts},
                       "model": {"adapter": "designed", "d_model": 8, "d_state": 2},
                       "train": {"max_steps": 0, "seed": seed, "test_size": 8}}).to_dict()
        out = {"schema": "recallbench.result/1", "status": status, "config_hash": config_hash(cfg),
               "seed": seed, "config": cfg, "state_size": 32, "steps": 3}
        if status == "ok":  # a run's total: test_size x the N_f queries of each sequence
            out.update(correct=correct, total=8 * facts, accuracy=correct / (8 * facts))
        else:
            out["error"] = "boom"
        return out

    store = tmp_path / "st"
    store.mkdir()
    bad = {**rec(9, 2), "config_hash": rec(8, 2)["config_hash"]}
    lines = [json.dumps(r) for r in (rec(0, 2, "failed"), rec(1, 2), rec(0, 2), rec(0, 4),
                                     rec(0, 2, correct=9), bad)]
    (store / "results.jsonl").write_text("\n".join(lines[:3]) + "\n{torn\n" + "\n".join(lines[3:]) + "\n")
    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps(rec(1, 2, correct=11)) + "\n[1]\n")

    def run(load):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runs = load([store, extra])
            report = scorer.score(runs)
        return runs, report, [str(w.message) for w in caught]

    slim, slim_report, slim_notes = run(scorer.load_runs)
    full, full_report, full_notes = run(scorer.load_records)
    assert slim_report == full_report and slim_notes == full_notes
    assert [r["config_hash"] for r in slim] == [r["config_hash"] for r in full]
    assert len(slim) == 4 and slim[0]["status"] == "ok"  # the ok record beat the failed one
    assert slim[0]["config"] is slim[1]["config"] is slim[3]["config"]  # seeds share one config
    assert "schema" not in slim[0] and "seed" not in slim[0]["config"]["train"]
    assert any(":4: ignoring a torn line" in n for n in slim_notes)
