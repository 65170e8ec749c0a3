"""`recallbench capacity` when nothing can be measured, when a budget runs out mid-cell, and
at the largest vocabulary.

* A search whose every run of a cell failed exits 1 with the reason in one line and writes
  no card (a card of runs that never ran read as a bound, with exit 0), either method;
  a method-2 card's headline shows the state a factory was given.
* A budget stops the training in progress: a layer of 40 ms a forward under a budget of
  about a second returns within a bound proportional to it, its runs not stored; method 2
  refuses a work budget below its first batch before training.
* The planner at V = 2^24 (its documented maximum) stays within a few hundred MB: method
  1's search for the next N_f is a bisection, the same N_f as the full grid it replaces.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import one_line_error
from recallbench.runs import budget, capacity, card_search

#: a run of a few steps on one learning rate (a record in about a second)
QUICK = ["--seeds", "0", "--set", "train.lr=0.01 train.max_steps=10 train.max_steps_limit=10 "
         "train.val_every=10 train.val_size=32 train.test_size=32"]

LAYERS = '''
import time

import torch
from torch import nn

START = time.monotonic()  # a slow layer stops the test after GUARD_S even unbounded
GUARD_S = 25.0


class Mixer(nn.Module):
    def __init__(self, d_model, how="ok"):
        super().__init__()
        self.how, self.lin = how, nn.Linear(d_model, d_model)

    def forward(self, x):
        if self.how in ("sleep", "spin"):
            if time.monotonic() - START > GUARD_S:
                raise RuntimeError("still training after the guard")
            t = time.process_time() if self.how == "spin" else None
            if t is None:
                time.sleep(0.04)
            while t is not None and time.process_time() - t < 0.04:
                pass
        y = self.lin(x)
        if self.how == "shape":
            return y[..., :-1]
        if self.how == "nan":
            return y * float("nan")
        return y


def raises(d_model):
    raise RuntimeError("boom in the factory")


def not_a_module(d_model):
    return 42


def shape(d_model):
    return Mixer(d_model, "shape")


def nan(d_model):
    return Mixer(d_model, "nan")


def huge(d_model):
    return nn.Linear(1 << 24, 1 << 24)  # 1 PB of weights: no machine allocates them


def sleeps(d_model):
    return Mixer(d_model, "sleep")


def spins(d_model):
    return Mixer(d_model, "spin")
'''


@pytest.fixture
def layers(tmp_path, monkeypatch):
    """A module of test layers on the import path, named anew for each test (so that its
    START is this test's)."""
    name = f"capacity_layers_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(LAYERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _ok_records(store: Path) -> list[dict]:
    path = store / "results.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r.get("status") == "ok"]


# -- 4: every run failed -------------------------------------------------------------------------

@pytest.mark.parametrize("method, factory, reason", [
    ("2", "raises", "RuntimeError: boom in the factory"),
    ("2", "not_a_module", "returned int, expected an nn.Module"),
    ("2", "shape", "must match the size of tensor"),
    ("2", "nan", "DivergedError"),
    ("2", "huge", "RuntimeError"),
    ("1", "raises", "RuntimeError: boom in the factory"),
    ("1", "nan", "DivergedError"),
])
def test_a_factory_whose_every_run_fails_exits_1_without_a_card(cli, tmp_path, layers, method,
                                                                 factory, reason):
    out = tmp_path / "card"
    rc, stdout, err = cli("capacity", "--method", method, "--factory", f"{layers}:{factory}",
                          "--state-size", "512", "--d-model", "8", *QUICK, "--out", str(out))
    assert rc == 1, (stdout, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("recallbench: error: every run of N_f = ") and reason in err, err
    assert "no card written" in err and "BOUND" not in stdout + err
    assert not (out / "card.json").exists() and not (out / "card.md").exists()


def test_a_method_2_card_headline_shows_the_state_it_was_given():
    """From the card's own state, else from the factory's ``--state-size`` (runs that failed
    have none): never "grows with L" for a state that was given."""
    from recallbench.api.config import resolve
    from recallbench.api.record import failed_record
    from recallbench.law import run_card, run_card_render

    base = dict(card_search_base())
    cfg = resolve(capacity.cell_config(base, 4, 0))
    card = run_card.build_run_card([failed_record(cfg, "RuntimeError: boom")])
    card["model"] = {**card["model"], "options": {"state_size": 512, "name": "mine"}}
    line = run_card_render.headline(card)
    assert "S = 512" in line and "grows with L" not in line, line
    card["model"]["options"] = {}
    assert "S = grows with L" in run_card_render.headline(card)
    res = card_search.measure(base, run_cell=_simulated_runs(), say=lambda s: None,
                              max_batches=1)
    assert res.card["state_size"] == 512 and "S = 512: N50 " in run_card_render.headline(res.card)


def card_search_base() -> dict:
    return {"task": {"name": "mqar", "vocab_size": 512},
            "model": {"adapter": "linear-mamba", "d_model": 32, "d_state": 8},
            "train": dict(capacity.TRAIN)}


def _simulated_runs(n50: float = 20.0):
    """run_cell of a probit truth (as tests/test_card_method.py's runner), state 512."""
    from scipy import special

    from recallbench.api.canonical import config_hash

    rng = np.random.default_rng(0)

    def run_cell(cfgs, limit=None):
        recs = []
        for c in cfgs:
            nf = c["task"]["num_facts"]
            q = float(special.ndtr(1.3 * (np.log(n50) - np.log(nf)) + 0.1 * rng.normal()))
            total = 1024 * nf
            recs.append({"status": "ok", "correct": int(rng.binomial(total, 1 / nf + (1 - 1 / nf) * q)),
                         "total": total, "converged": True, "stop_reason": "plateau",
                         "state_size": 512, "state_bits": 32, "steps": 2000,
                         "seed": c["train"]["seed"], "config": c, "config_hash": config_hash(c),
                         "cpu_s": 1.0, "wall_s": 1.0, "lr": 0.01,
                         "lr_search": [{"lr": lr, "steps": 2000} for lr in (0.003, 0.01, 0.03)]})
        return recs

    return run_cell


# -- 5: a budget stops the training in progress ---------------------------------------------------

@pytest.mark.parametrize("flags, factory", [
    (["--method", "1", "--time-budget", "0.02"], "sleeps"),   # 1.2 s of wall time
    (["--time-budget", "0.02"], "sleeps"),                    # method 2's wall-time limit
    (["--method", "1", "--cpu-budget", "0.02"], "spins"),     # 1.2 CPU-s
])
def test_a_budget_stops_a_slow_layer_mid_cell(cli, tmp_path, layers, flags, factory):
    """A layer of 40 ms a forward and the default protocol (3 learning rates x 2,000
    steps: minutes a run): the first cell's cost was predicted as zero and budgets were
    compared only between cells, so it trained on.  Now the run is stopped when the
    budget is spent: nothing finished, so no card and exit 3, nothing stored (a rerun
    trains it again)."""
    out = tmp_path / "card"
    t0 = time.monotonic()
    rc, stdout, err = cli("capacity", *flags, "--factory", f"{layers}:{factory}",
                          "--state-size", "512", "--d-model", "8", "--seeds", "0,1",
                          "--out", str(out))
    took = time.monotonic() - t0
    assert took < 20, f"{took:.1f} s for a budget of 1.2 s"
    assert rc == 3, (stdout, err)
    assert "stopped and not stored" in stdout and "no card: the budget ran out" in stdout
    assert not (out / "card.json").exists() and not _ok_records(out / "store")


def test_a_budget_spent_mid_cell_keeps_the_cells_before_it():
    """Method 1 with ``cut``: the cell that was stopped is not in the card, the earlier ones
    are, and the card is a bound of the time budget (not a failure)."""
    inner, calls = _simulated_runs(), []

    def run_cell(cfgs, limit=None):
        calls.append(limit)
        if len(calls) == 2:
            assert limit.wall_until is not None and limit.wall_until > time.time()
            raise budget.BudgetSpent("stopped")
        return inner(cfgs)

    said = []
    res = capacity.measure(card_search_base(), run_cell=run_cell, budget_s=600, cut=True,
                           say=said.append)
    assert res.stopped == "time budget" and not res.failed and len(calls) == 2
    assert len(res.card["cells"]) == 1 and len(res.records) == 2
    assert any("ran out while N_f = " in s for s in said)
    calls.clear()
    res = capacity.measure(card_search_base(), run_cell=lambda c, limit: calls.append(limit)
                           or inner(c), budget_s=600, cpu=True, cut=True, say=lambda s: None,
                           max_cells=1)
    assert res.stopped == "1 cells" and calls == [budget.Limit(cpu_s=300.0)]  # 2 runs share it


def test_a_deadline_stops_python_code_in_bounded_time():
    """Wall time and this process's CPU time; a body that ends first is left alone."""
    for limit, busy in ((budget.Limit(wall_until=time.time() + 0.3), False),
                        (budget.Limit(cpu_s=0.3), True)):
        t0 = time.monotonic()
        with pytest.raises(budget.BudgetSpent):
            with budget.deadline(limit, poll_s=0.01):
                while time.monotonic() - t0 < 20:
                    if not busy:
                        time.sleep(0.01)
        assert time.monotonic() - t0 < 5
    with budget.deadline(budget.Limit(wall_until=time.time() + 5)):
        pass
    time.sleep(0.1)  # nothing left pending after the block
    with pytest.raises(budget.BudgetSpent):
        with budget.deadline(budget.Limit(wall_until=time.time() - 1)):
            pass


def _sleeper(cfg, progress=None):
    for _ in range(600):
        time.sleep(0.1)


@pytest.mark.slow
def test_a_deadline_stops_a_run_in_a_worker_process():
    """The processes executor: the stopped run comes back as BudgetSpent (not a failed
    record), well before the minute the run would take."""
    from recallbench.runs.executors import Processes

    ex = Processes(1)
    t0 = time.monotonic()
    try:
        with budget.limited(ex, budget.Limit(wall_until=time.time() + 5)):
            ex.runner.runner = _sleeper  # the worker imports this module (on sys.path)
            ((_, result),) = list(ex.run([[capacity.cell_config(card_search_base(), 4, 0)]]))
        assert isinstance(result, budget.BudgetSpent), result
        assert time.monotonic() - t0 < 40
        assert ex.runner is None  # put back
    finally:
        ex.close()


def test_method_2_refuses_a_work_budget_below_its_first_batch(cli, tmp_path, layers):
    """The first batch at its nominal steps (1 run x 3 lrs x 2,000 steps x 32 sequences x
    L = 8: about 1.5 Mtok) cannot fit 1 Mtok: refused before anything trains (it wrote a
    card of no runs, then failed with a traceback)."""
    rc, stdout, err = cli("capacity", "--factory", f"{layers}:sleeps", "--state-size", "512",
                          "--d-model", "8", "--seeds", "0", "--work-budget", "1",
                          "--out", str(tmp_path / "card"))
    one_line_error(rc, err, "work budget of 1 Mtok", "the first batch (N_f = ", "give at least")
    assert not (tmp_path / "card" / "card.json").exists()
    assert not _ok_records(tmp_path / "card" / "store")


# -- 8: the planner at the largest vocabulary -----------------------------------------------------

def _grid_facts(target, d, n_eff, vocab, share, done=()):
    """The planner as it was: the law at every N_f up to V/2 − 1, stably sorted by its
    distance to ``target``, the first not in ``done``."""
    grid = np.arange(capacity.MIN_FACTS, max(vocab // 2 - 1, capacity.MIN_FACTS) + 1)
    p = capacity.predicted(grid, d, n_eff, vocab, share)
    order = np.argsort(np.abs(p - target), kind="stable")
    return next((int(grid[i]) for i in order if int(grid[i]) not in done), None)


def _same_as_the_grid(vocabs, ds, n_effs, targets, shares, seed=0):
    rng = np.random.default_rng(seed)
    cases = 0
    for vocab in vocabs:
        top = max(vocab // 2 - 1, capacity.MIN_FACTS)
        for d in ds:
            for n_eff in n_effs:
                for share in shares:
                    # the grid once per law; each target and set of cells done against it
                    grid = np.arange(capacity.MIN_FACTS, top + 1)
                    p = capacity.predicted(grid, d, n_eff, vocab, share)
                    for target in targets:
                        order = np.argsort(np.abs(p - target), kind="stable")
                        for done in (set(), {int(x) for x in rng.integers(2, top + 1, size=4)}):
                            old = next((int(grid[i]) for i in order
                                        if int(grid[i]) not in done), None)
                            new = capacity.nearest_facts(d, n_eff, vocab, target, share, done)
                            assert new == old, (vocab, d, n_eff, target, share, done, old, new)
                            cases += 1
    return cases


def test_the_bisection_finds_the_n_f_of_the_full_grid():
    """Including laws flat to rounding (a state far beyond V: the quadrature's last bits
    pick the N_f) and targets beyond either end."""
    assert _grid_facts(0.75, 32, 8.0, 512, 1.0) == capacity.nearest_facts(32, 8.0, 512)
    n = _same_as_the_grid((8, 100, 512, 4096), (4, 32, 128), (0.5, 8.0, 1e6),
                          (0.75, 0.4, 0.95, 0.01), (1.0, 0.3))
    assert n == 4 * 3 * 3 * 4 * 2 * 2


@pytest.mark.slow
def test_the_bisection_finds_the_n_f_of_the_full_grid_everywhere():
    _same_as_the_grid((8, 9, 16, 64, 100, 512, 1000, 4096), (1, 4, 8, 32, 128, 1024),
                      (0.01, 0.5, 2, 8, 64, 1000, 1e6, 1e9),
                      (0.75, 0.6, 0.4, 0.8, 0.2, 0.95, 0.01, 0.999), (1.0, 0.0, 0.37))


def test_the_planner_fits_in_3_gib_at_the_largest_vocabulary(tmp_path):
    """V = 2^24: method 1's first N_f and next N_f, and method 2's first, in a process
    whose address space is capped at 3 GiB (the grids asked for 5 GiB, then died)."""
    script = textwrap.dedent("""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        from recallbench.runs import capacity, card_search
        V = 2 ** 24
        for d, n_eff in ((8, 1.0), (64, 4096.0), (1024, 1e9)):
            first = card_search.first_facts(d, n_eff, V)
            cells = [{"num_facts": first, "accuracy": 0.7, "recall": True, "mid": True}]
            card = {"cells": cells, "n_eff": {"value": n_eff}, "guess_share": 0.5}
            nxt, why = capacity.next_facts(card, d, n_eff, V)
            print(first, nxt, capacity.nearest_facts(d, n_eff, V), why)
    """)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [line.split()[:3] for line in p.stdout.splitlines()]
    assert len(rows) == 3 and all(int(x) >= capacity.MIN_FACTS for row in rows
                                  for x in row if x != "None"), p.stdout
