"""The time budget shared by `sweep` and `leaderboard run` (recallbench.runs.budget): the
gate that starts an item on each free worker, the stop before an item that would overrun, resuming through the store,
the last line and exit status, and the estimate of how many budget-sized calls a grid needs.

A fake clock advances a fixed time per point, so no test waits; the `designed` adapter
trains nothing.  The slow tests start real worker processes under a gate, and run the real
command twice in fresh interpreters."""
from __future__ import annotations

import json
import types

import pytest
import yaml

from recallbench.api.config import resolve
from recallbench.api.errors import ConfigError
from recallbench.runs import budget
from recallbench.runs.budget import EXIT_BUDGET, Gate, ending, estimate

TASK = {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4}
TRAIN = {"max_steps": 0, "val_size": 16, "test_size": 16, "batch_size": 8, "progress": False}


def _sweep(tmp_path, adapter="designed", seeds=(0, 1, 2), **train) -> str:
    data = {"base": {"task": TASK, "model": {"adapter": adapter, "d_model": 8, "d_state": 4},
                     "train": {**TRAIN, **train}},
            "axes": {"model.d_state": [2, 4], "train.seed": list(seeds)}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _simulate(durations, parallel: int, budget_s: float | None):
    """``parallel`` workers on a fake clock take the items in order, each asking the gate
    when it is free (as the executors do); the items that finish together are told before
    any worker asks again.  Returns the items run, in start order, and the time it ended."""
    now, running, ran = [0.0], [], []
    gate = Gate(budget_s, clock=lambda: now[0])
    todo = list(range(len(durations)))
    while True:
        while todo and len(running) < parallel:
            i = todo.pop(0)
            if not gate.admit(i):
                todo.clear()
                break
            ran.append(i)
            running.append((now[0] + durations[i], i))
        if not running:
            return ran, now[0]
        now[0] = min(end for end, _ in running)
        for end, i in [r for r in running if r[0] == now[0]]:
            running.remove((end, i))
            gate.finished(i)


def test_gate_without_budget_admits_everything():
    assert _simulate([10.0] * 7, 2, None) == (list(range(7)), 40.0)


def test_gate_stops_before_an_item_that_would_overrun():
    """Items of 10 s on 3 workers, a 45 s budget: 3 start at once, 3 more at 10, 20 and
    30 s (the time left holds 10 s), none at 40 s (5 s left); 2 items never start."""
    ran, end = _simulate([10.0] * 14, 3, 45.0)
    assert ran == list(range(12)) and end == 40.0


def test_gate_takes_the_slowest_item_seen():
    """One worker: an item of 5 s, then items of 20 s, a 60 s budget: after the first the
    estimate is 5 s, after the second 20 s; the third starts at 25 s (35 s left), the
    fourth would start at 45 s with 15 s left, and does not."""
    ran, end = _simulate([5.0] + [20.0] * 10, 1, 60.0)
    assert ran == [0, 1, 2] and end == 45.0


def test_a_free_worker_does_not_wait_for_a_long_item():
    """A 100 s item beside 10 s ones, two workers, 150 s: the second worker keeps taking
    10 s items while the long one runs, until the long one's own running time (k·10 s at
    k·10 s) says the time left would not hold another: 8 short items,
    9 items in all, done at 100 s.  Rounds that wait for their slowest item would have
    run the first two only (one 100 s round, then 50 s left)."""
    ran, end = _simulate([100.0] + [10.0] * 20, 2, 150.0)
    assert ran == list(range(9)) and end == 100.0


def test_gate_refuses_for_good_and_forgets_lost_items():
    now = [0.0]
    gate = Gate(20.0, clock=lambda: now[0])
    assert gate.admit("a") and gate.admit("b")
    now[0] = 12.0
    gate.forget("b")  # lost with its worker: its 12 s say nothing about items
    gate.finished("a")
    assert gate.estimate(now[0]) == 12.0 and not gate.admit("c")
    now[0] = 0.0  # the refusal stands, whatever the clock says next
    assert not gate.admit("d") and gate.running == {}


@pytest.mark.parametrize("counts, budget_s, want_line, want_status", [
    ({"left": 0, "failed": 0, "unstarted": 0}, 60.0, "all done: every point is in st", 0),
    ({"left": 4, "failed": 0, "unstarted": 4}, 60.0,
     "4 points left (stopped by the time budget of 60 s): the same command continues from st",
     EXIT_BUDGET),
    ({"left": 5, "failed": 1, "unstarted": 4}, 60.0,
     "5 points left (stopped by the time budget of 60 s, 1 failed, to be retried)", 1),
    ({"left": 3, "failed": 0, "unstarted": 3}, None, "3 points left (not started)", 0),
])
def test_ending(counts, budget_s, want_line, want_status):
    line, status = ending(counts, "st", budget_s)
    assert line.startswith(want_line) and status == want_status


def test_estimate_counts_layers_and_learning_rates():
    one = resolve({"task": TASK, "model": {"adapter": "linear-mamba", "d_model": 8, "d_state": 4},
                   "train": {**TRAIN, "max_steps": 1000}})
    deep = resolve({"task": TASK, "model": {"adapter": "linear-mamba", "d_model": 8, "d_state": 4,
                                            "n_layers": 3},
                    "train": {**TRAIN, "max_steps": 500, "lr": [0.001, 0.01]}})
    est = estimate([one, deep, deep], step_ms=9.0, speedup=1.0, chunk_s=30.0)
    # 1000·1·1 + 2·(500·3·2) layer-steps = 7000; 7000 · 9 ms = 63 s: three calls of 30 s
    assert (est.points, est.steps, est.seconds, est.chunks) == (3, 7000, 63.0, 3)
    assert estimate([one], step_ms=9.0, speedup=3.0, chunk_s=30.0).chunks == 1
    assert "3 call(s) of --time-budget 30 s" in est.line(9.0, 1.0)


def _fake_clock(monkeypatch, seconds_per_point: float):
    """Every point run in this process advances the budget's clock by ``seconds_per_point``."""
    from recallbench.harness import train

    now, real_run = [0.0], train.run

    def run(cfg, progress=False):
        now[0] += seconds_per_point
        return real_run(cfg, progress=False)

    monkeypatch.setattr(train, "run", run)
    monkeypatch.setattr(budget, "time", types.SimpleNamespace(monotonic=lambda: now[0]))


def test_sweep_stops_by_the_budget_and_the_same_command_resumes(cli, tmp_path, monkeypatch):
    """6 points of 10 s each, a 25 s budget: 2 run per call (the first round, then the one
    round the 15 s left hold), exit 3 until the last call, which says all done; no point
    runs twice."""
    _fake_clock(monkeypatch, 10.0)
    path = _sweep(tmp_path)
    for want_left in (4, 2):
        rc, out, err = cli("sweep", path, "--store", "st", "--time-budget", "25")
        assert rc == EXIT_BUDGET, err
        assert "time budget 25 s" in out.splitlines()[0]
        assert out.splitlines()[-1] == (f"{want_left} points left (stopped by the time budget "
                                        f"of 25 s): the same command continues from st")
    rc, out, err = cli("sweep", path, "--store", "st", "--time-budget", "25")
    assert rc == 0 and out.splitlines()[-1] == "all done: every point is in st"
    hashes = [json.loads(x)["config_hash"]
              for x in (tmp_path / "st" / "results.jsonl").read_text().splitlines()]
    assert len(hashes) == 6 == len(set(hashes))


def test_budget_with_ensembles_counts_batches_as_rounds(cli, tmp_path, monkeypatch):
    """--ensemble 3: two batches of three seeds; a batch is one round of its own."""
    pytest.importorskip("recallbench.harness.ensemble")
    path = _sweep(tmp_path, adapter="linear-mamba", max_steps=1)
    rc, out, err = cli("sweep", path, "--store", "st", "--ensemble", "3", "--time-budget", "600")
    assert rc == 0, err
    assert "ensembles of <= 3: 2 batches" in out and out.splitlines()[-1].startswith("all done")


def test_dry_run_prints_points_left_and_the_estimate(cli, tmp_path):
    path = _sweep(tmp_path, max_steps=1000)
    rc, out, err = cli("sweep", path, "--dry-run", "--step-ms", "9", "--speedup", "3",
                       "--time-budget", "10")
    # 6 points x 1000 steps x 9 ms / 3 = 18 s: two calls of 10 s
    assert rc == 0, err
    assert "6 points left to run" in out
    assert "6,000 layer-steps x 9 ms / 3 speed-up = 0.3 min: 2 call(s) of --time-budget 10 s" in out
    rc, out, err = cli("sweep", path, "--dry-run")
    assert rc == 0 and "estimate" not in out


@pytest.mark.parametrize("args, message", [
    (["--time-budget", "0.5"], "--time-budget 0.5: must be in [1, 1e7] seconds"),
    (["--time-budget", "1e8"], "--time-budget 1e+08: must be in [1, 1e7] seconds"),
    (["--step-ms", "9"], "--step-ms is for --dry-run"),
    (["--dry-run", "--step-ms", "0"], "--step-ms 0: must be in (0, 1e6] milliseconds"),
    (["--dry-run", "--speedup", "2"], "--speedup is for --dry-run --step-ms MS"),
    (["--dry-run", "--step-ms", "9", "--speedup", "-1"], "--speedup -1: must be in (0, 1e4]"),
    (["--adaptive", "--time-budget", "60"], "--time-budget is not for --adaptive"),
])
def test_bad_budget_flags_are_one_line(cli, tmp_path, args, message):
    rc, out, err = cli("sweep", _sweep(tmp_path), "--store", "st", *args)
    assert rc == 2 and err.count("\n") == 1 and message in err
    assert not (tmp_path / "st").exists()


def test_check_budget_names_the_flag():
    with pytest.raises(ConfigError, match=r"--time-budget 0: must be in \[1, 1e7\] seconds"):
        budget.check_budget(0.0)
    budget.check_budget(None)


@pytest.mark.slow
def test_budget_stops_a_real_sweep_and_resumes(cli_subprocess, tmp_path):
    """Fresh interpreters, real clock: linear-mamba points of about a second each and a
    one-second budget run one point per call (the first round always runs), exit 3, and
    the calls together run every point once."""
    path = _sweep(tmp_path, adapter="linear-mamba", seeds=(0,), max_steps=150,
                  val_every=150, threads=1)
    statuses = []
    for _ in range(3):
        rc, out, err = cli_subprocess("sweep", path, "--store", "st", "--time-budget", "1")
        statuses.append(rc)
        if rc == 0:
            break
    assert statuses[0] == EXIT_BUDGET and statuses[-1] == 0, (statuses, err)
    assert "all done" in out.splitlines()[-1]
    lines = (tmp_path / "st" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2 == len({json.loads(x)["config_hash"] for x in lines})


class _CountingGate(Gate):
    """A gate without a budget that admits ``n`` items and records the most in flight."""

    def __init__(self, n: int):
        super().__init__(None)
        self.n, self.admitted, self.most = n, [], 0

    def admit(self, item) -> bool:
        if len(self.admitted) >= self.n:
            return False
        self.admitted.append(item)
        self.running[item] = 0.0
        self.most = max(self.most, len(self.running))
        return True


@pytest.mark.slow
def test_process_workers_take_items_only_as_the_gate_admits():
    """Two real worker processes, five `designed` points, a gate that admits three: three
    records come back, never more than two items were out at once (none queued ahead of
    the gate), and every admitted item was told finished."""
    from recallbench.runs.executors import Processes

    cfg = resolve({"task": TASK, "model": {"adapter": "designed", "d_model": 8, "d_state": 4},
                   "train": TRAIN}).to_dict()
    gate, ex = _CountingGate(3), Processes(2)
    try:
        got = dict(ex.run([[cfg]] * 5, gate=gate))
    finally:
        ex.close()
    assert sorted(got) == sorted(gate.admitted) == [0, 1, 2]
    assert all(r[0]["status"] == "ok" for r in got.values()), got
    assert gate.most == 2 and gate.running == {}


def test_ray_submits_only_what_the_gate_admits(monkeypatch):
    """A fake cluster of two slots: with a gate, at most two tasks are out at once and the
    ones refused are never submitted; without one, all go at once (the queue is Ray's)."""
    from recallbench.runs import ray_executor

    class Cluster:
        def __init__(self):
            self.out, self.most = [], 0

        def submit(self, item, *_):
            self.out.append(item)
            self.most = max(self.most, len(self.out))
            return item[0]["n"]

        def wait(self, refs, num_returns, timeout):
            self.out.pop(0)
            return refs[:1], refs[1:]

        def get(self, ref):
            return [{"n": ref}]

    def run(gate):
        cluster = Cluster()
        ex = object.__new__(ray_executor.Ray)
        ex.ray, ex.threads, ex.gpus, ex.ensemble, ex.parallel = cluster, 1, 0, False, 2
        ex._remote = types.SimpleNamespace(remote=cluster.submit)
        return [i for i, _ in ex.run([[{"n": i}] for i in range(6)], gate=gate)], cluster.most

    gate = _CountingGate(4)
    assert run(gate) == ([0, 1, 2, 3], 2) and gate.most == 2 and gate.running == {}
    assert run(None) == (list(range(6)), 6)
