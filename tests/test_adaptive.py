"""Theory-guided search: recovers a known a from records simulated from the law with far
fewer runs than the grid, places runs in the informative mid range, is deterministic,
and runs end to end on the designed adapter."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from recallbench.law import theory
from recallbench.runs.adaptive import adaptive_search, cell_config, choose_cells, fit_records

V, NF = 128, 16
BASE = {"task": {"name": "mqar", "vocab_size": V, "seq_len": 64, "num_facts": NF},
        "model": {"adapter": "linear-mamba"}, "train": {"test_size": 256, "progress": False}}
DS = [2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64]
NS = [1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32]
GRID = [(d, n) for d in DS for n in NS]  # cells with N > D are dropped by the search


def simulated(a, b, total=4096, calls=None):
    """A runner drawing binomial counts from p = Φ(x(a) − b), seeded by the cell."""
    def runner(cfg):
        d, n = cfg["model"]["d_model"], cfg["model"]["d_state"]
        if calls is not None:
            calls.append((d, n))
        p = special.ndtr(math.sqrt(n * d / (a * NF + n)) - b)
        k = int(np.random.default_rng([d, n]).binomial(total, p))
        return {"status": "ok", "correct": k, "total": total,
                "config": {"model": {"d_model": d, "d_state": n, "n_layers": 1},
                           "task": {"num_facts": NF, "vocab_size": V}}}
    return runner


@pytest.mark.parametrize("a_true", [1.25, 3.0, 0.6])
def test_recovers_known_a_with_few_runs(a_true):
    b_true = theory.m_v(V)
    calls = []
    out = adaptive_search(BASE, GRID, runner=simulated(a_true, b_true, calls=calls), tol=0.10,
                          max_runs=40)
    cells = out["candidates"]
    assert cells == sum(1 for d, n in GRID if n <= d)
    assert out["converged"] and out["stopped"] == "tolerance"
    assert out["runs"] == len(calls) == len(out["records"]) <= 0.10 * cells
    assert len(set(calls)) == len(calls) and all(n <= d for d, n in calls)
    lo, hi = out["a_ci"]
    assert lo <= a_true <= hi and abs(out["a"] - a_true) <= 0.10 * a_true
    assert out["half_width"] <= 0.10
    # the full grid agrees
    full = fit_records([simulated(a_true, b_true)(cell_config(BASE, d, n)) for d, n in GRID
                        if n <= d])
    assert abs(out["a"] - full.a) <= 0.10 * full.a
    # history: one entry per round, the first placed with the paper's a for linear MQAR
    assert out["history"][0]["placed_with"]["a"] == theory.coefficient_a("linear", "mqar")
    assert out["history"][-1]["runs"] == out["runs"]


def test_deterministic_and_budget():
    runner = simulated(2.0, theory.m_v(V))
    a = adaptive_search(BASE, GRID, runner=runner, tol=0.10, max_runs=40)
    b = adaptive_search(BASE, GRID, runner=runner, tol=0.10, max_runs=40)
    assert a["cells"] == b["cells"] and a["a"] == b["a"] and a["a_ci"] == b["a_ci"]
    tight = adaptive_search(BASE, GRID, runner=runner, tol=1e-6, max_runs=6, batch=4)
    assert tight["runs"] == 6 and tight["stopped"] == "budget" and not tight["converged"]
    small = adaptive_search(BASE, [(4, 2), (8, 4), (16, 8), (8, 16)], runner=runner,
                            tol=1e-6, max_runs=40)
    assert small["stopped"] == "exhausted" and small["runs"] == 3  # (8, 16) has N > D


@pytest.mark.parametrize("p_range", [None, (0.2, 0.8)])
def test_first_cells_are_mid_range(p_range):
    grid = np.array([(d, n) for d, n in GRID if n <= d], float)
    a, b = theory.coefficient_a("linear", "mqar"), theory.m_v(V)
    kw = {"p_range": p_range} if p_range else {}
    chosen = choose_cells(grid, np.zeros(len(grid), bool), a, b, NF, 1, 4096, batch=6, **kw)
    x = np.sqrt(grid[chosen, 1] * grid[chosen, 0] / (a * NF + grid[chosen, 1]))
    p = special.ndtr(x - b)
    lo, hi = p_range or (0.05, 0.95)
    assert len(set(chosen)) == 6 and np.all((p >= lo) & (p <= hi))


def test_designed_adapter_end_to_end():
    base = {"task": {"name": "mqar", "vocab_size": 64, "seq_len": 32, "num_facts": 8},
            "model": {"adapter": "designed"},
            "train": {"test_size": 128, "val_size": 8, "progress": False}}
    cells = [(d, n) for d in (4, 6, 8, 12, 16, 24, 32) for n in (1, 2, 3, 4, 6, 8, 12, 16)]
    out = adaptive_search(base, cells, tol=0.10, max_runs=12, batch=4)
    assert 4 <= out["runs"] <= 12 and len(out["records"]) == out["runs"]
    assert all(r["status"] == "ok" and r["config"]["model"]["adapter"] == "designed"
               for r in out["records"])
    # the paper's a for the designed model places the first round
    assert out["history"][0]["placed_with"]["a"] == theory.coefficient_a("designed", "mqar")
    assert math.isfinite(out["a"]) and 0.5 < out["a"] < 20


def overdispersed(a, b, total=4096, scatter=0.15):
    """Like ``simulated`` but each cell's recall is off the law by a fixed, cell-seeded
    probit shift (sd ``scatter``): what trained runs look like (dispersion in the hundreds)."""
    def runner(cfg):
        d, n = cfg["model"]["d_model"], cfg["model"]["d_state"]
        rng = np.random.default_rng([d, n, 7])
        p = special.ndtr(math.sqrt(n * d / (a * NF + n)) - b + scatter * rng.standard_normal())
        k = int(rng.binomial(total, p))
        return {"status": "ok", "correct": k, "total": total,
                "config": {"model": {"d_model": d, "d_state": n, "n_layers": 1},
                           "task": {"num_facts": NF, "vocab_size": V}}}
    return runner


def test_stable_rule_stops_overdispersed_data_the_interval_rule_cannot():
    a_true, b_true = 1.25, theory.m_v(V)
    full = fit_records([overdispersed(a_true, b_true)(cell_config(BASE, d, n))
                        for d, n in GRID if n <= d])
    assert full.dispersion > 20  # far from binomial, like trained runs
    kw = dict(max_runs=40, batch=4, runner=overdispersed(a_true, b_true))
    interval = adaptive_search(BASE, GRID, stop="interval", **kw)
    stable = adaptive_search(BASE, GRID, stop="stable", **kw)
    either = adaptive_search(BASE, GRID, stop="either", **kw)
    assert interval["stopped"] == "budget" and interval["runs"] == 40
    assert stable["stopped"] == "stable" and 12 <= stable["runs"] < 40
    assert either["runs"] == stable["runs"] and either["stopped"] == "stable"
    last3 = [h["a"] for h in stable["history"][-3:]]
    assert max(abs(x - last3[-1]) for x in last3) <= 0.05 * last3[-1]
    assert abs(stable["a"] - full.a) / full.a < 0.15


def test_bad_stop_rule_is_refused():
    with pytest.raises(ValueError, match="stop must be one of interval, stable, either"):
        adaptive_search(BASE, GRID, runner=simulated(1.25, 2.0), stop="never")


def test_adaptive_sweep_runs_through_the_store_and_resumes(cli, tmp_path):
    import json

    import yaml

    sweep = {"base": {"task": {"name": "mqar", "vocab_size": 64, "seq_len": 32, "num_facts": 8},
                      "model": {"adapter": "designed"},
                      "train": {"test_size": 128, "val_size": 8, "progress": False}},
             "axes": {"model.d_model": [4, 6, 8, 12, 16, 24, 32],
                      "model.d_state": [1, 2, 3, 4, 6, 8, 12, 16]},
             "skip": {"n_gt_d": True}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sweep))
    rc, out, err = cli("sweep", "s.yaml", "--store", "st", "--adaptive", "--max-runs", "8")
    assert rc == 0, err
    assert "adaptive search over 46 cells" in out and "round 0:" in out
    lines = (tmp_path / "st" / "results.jsonl").read_text().splitlines()
    summary = json.loads((tmp_path / "st" / "adaptive.json").read_text(),
                         parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert len(lines) == summary["runs"] == summary["ran"] <= 8 and summary["served"] == 0
    # a rerun replays the same choices from the store: nothing runs twice
    rc, out, err = cli("sweep", "s.yaml", "--store", "st", "--adaptive", "--max-runs", "8")
    assert rc == 0, err
    again = json.loads((tmp_path / "st" / "adaptive.json").read_text())
    assert again["ran"] == 0 and again["served"] == summary["runs"]
    assert again["a"] == summary["a"] and again["cells"] == summary["cells"]
    assert len((tmp_path / "st" / "results.jsonl").read_text().splitlines()) == len(lines)


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["processes", "ray"])
def test_adaptive_sweep_on_worker_executors_matches_in_process(cli, tmp_path, executor,
                                                               monkeypatch):
    """Rounds on workers (the executor is called once a round): same cells, same a."""
    import json

    import yaml

    if executor == "ray":
        pytest.importorskip("ray", reason="ray is not installed (pip install 'recallbench[ray]')")
        monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local instance, whatever else runs
    sweep = {"base": {"task": {"name": "mqar", "vocab_size": 64, "seq_len": 32, "num_facts": 8},
                      "model": {"adapter": "designed"},
                      "train": {"test_size": 128, "val_size": 8, "progress": False}},
             "axes": {"model.d_model": [4, 8, 12, 16, 24, 32], "model.d_state": [1, 2, 4, 8]},
             "skip": {"n_gt_d": True}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sweep))
    rc, out, err = cli("sweep", "s.yaml", "--store", "here", "--adaptive", "--max-runs", "6")
    assert rc == 0, err
    rc, out, err = cli("sweep", "s.yaml", "--store", "there", "--adaptive", "--max-runs", "6",
                       "--executor", executor, "--workers", "2")
    assert rc == 0, err + out
    assert "round 2:" in out  # batches of 2 (one per worker): three rounds at least
    here, there = (json.loads((tmp_path / st / "adaptive.json").read_text())
                   for st in ("here", "there"))
    assert there["cells"] == here["cells"] and there["ran"] == here["ran"] == 6
    assert there["a"] == pytest.approx(here["a"], rel=1e-9)


def test_adaptive_sweep_refuses_other_axes(cli, tmp_path):
    import yaml

    sweep = {"base": {"task": {"name": "mqar", "vocab_size": 64, "seq_len": 32, "num_facts": 8},
                      "model": {"adapter": "designed"}, "train": {"progress": False}},
             "axes": {"model.d_model": [4, 8], "model.d_state": [2, 4], "train.lr": [0.01, 0.001]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sweep))
    rc, out, err = cli("sweep", "s.yaml", "--store", "st", "--adaptive")
    assert rc == 2 and "axis train.lr takes several values" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "st").exists()
    rc, out, err = cli("sweep", "s.yaml", "--store", "st", "--adaptive", "--tol", "2")
    assert rc == 2 and "--tol 2" in err and "(0, 1)" in err


def test_adaptive_sweep_takes_the_best_of_seeds(cli, tmp_path):
    import json

    import yaml

    from recallbench.runs.store import read_store

    sweep = {"base": {"task": {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4},
                      "model": {"adapter": "linear-mamba"},
                      "train": {"max_steps": 3, "val_every": 3, "val_size": 16, "test_size": 32,
                                "batch_size": 16, "progress": False}},
             "axes": {"model.d_model": [4, 8, 16], "model.d_state": [1, 2, 4],
                      "train.seed": [0, 1]},
             "skip": {"n_gt_d": True}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sweep))
    rc, out, err = cli("sweep", "s.yaml", "--store", "st", "--adaptive", "--max-runs", "4",
                       "--ensemble", "2")
    assert rc == 0, err
    assert "best of 2 seeds" in out
    summary = json.loads((tmp_path / "st" / "adaptive.json").read_text())
    recs = read_store(tmp_path / "st").records
    assert summary["ran"] == len(recs) == 2 * summary["runs"]  # every chosen cell, both seeds
    assert all(r.get("ensemble") == 2 for r in recs)  # a cell's seeds trained as one model
    by_cell = {}
    for r in recs:
        by_cell.setdefault((r["config"]["model"]["d_model"], r["config"]["model"]["d_state"]),
                           []).append(r["accuracy"])
    assert sorted(map(tuple, summary["cells"])) == sorted(by_cell)


def test_best_of_seeds():
    from recallbench.runs.adaptive_sweep import best_of_seeds

    a = {"status": "ok", "accuracy": 0.5, "correct": 50, "total": 100, "seed": 2}
    b = {"status": "ok", "accuracy": 0.5, "correct": 50, "total": 100, "seed": 1}
    c = {"status": "ok", "accuracy": 0.4, "correct": 40, "total": 100, "seed": 0}
    bad = {"status": "failed", "seed": 3}
    assert best_of_seeds([c, a, b, bad]) is b  # highest accuracy, then the lowest seed
    assert best_of_seeds([bad, {"status": "failed", "seed": 4}]) is bad
