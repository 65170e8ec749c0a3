"""`leaderboard run`: executors, workers sharing a GPU, the time budget that stops a run
cleanly between rounds, and resuming from the store (in-process here; worker processes and
a real interruption in the slow tests).

The suites use the `designed` adapter (fixed weights, nothing trained), except the slow
interruption test, which needs points that take a moment.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from recallbench import leaderboard as lb
from recallbench.api.errors import ConfigError
from recallbench.leaderboard.grid.run import MAX_GPU_WORKERS

SUITE = {
    "schema": "recallbench.suite/1", "name": "tiny", "title": "tiny",
    "task": {"name": "mqar", "vocab_size": 32, "seq_len": 32}, "num_facts": [2, 4, 8],
    "budgets": [{"name": "D16-N8", "model": {"d_model": 16, "d_state": 8, "n_layers": 1}}],
    "train": {"lr": 0.01, "max_steps": 0, "batch_size": 8, "val_size": 16, "test_size": 64},
    "seeds": [0, 1], "device": "cpu", "threads": 1, "tolerance": {"accuracy": 0.0},
}


def _suite(tmp_path: Path, **changes) -> Path:
    d = tmp_path / "leaderboards" / "tiny"
    d.mkdir(parents=True)
    (d / "suite.yaml").write_text(yaml.safe_dump({**SUITE, **changes}))
    return d


def _lines(store: Path) -> list[dict]:
    return [json.loads(x) for x in (store / "results.jsonl").read_text().splitlines()]


def test_time_budget_stops_between_points_and_the_next_call_continues(tmp_path):
    """A fake clock: every point takes 10 s.  A 25 s budget runs 2 points (the first
    round, then the one round the 15 s left hold), the next calls continue, and no point
    runs twice."""
    from recallbench.harness.train import run

    suite = lb.load_suite(_suite(tmp_path))
    now = [0.0]

    def runner(cfg, progress=False):
        now[0] += 10.0
        return run(cfg, progress=False)

    store, seen = tmp_path / "store", []
    for want_ran, want_left in [(2, 4), (2, 2), (2, 0)]:
        counts = lb.run_suite(suite, "designed", store, runner=runner, time_budget=25.0,
                              clock=lambda: now[0], log=seen.append)
        assert (counts["ran"], counts["left"]) == (want_ran, want_left)
    hashes = [r["config_hash"] for r in _lines(store)]
    assert len(hashes) == 6 and len(set(hashes)) == 6
    assert "time budget 25 s" in seen[0] and seen[2].startswith("[2/6] D16-N8 N_f=2 seed=1: accuracy")


def test_run_cli_says_what_is_left(tmp_path, cli):
    d = _suite(tmp_path)
    rc, out, _ = cli("leaderboard", "run", "--suite", str(d), "--adapter", "designed",
                     "--store", str(tmp_path / "s"), "--limit", "4")
    assert rc == 0 and "done: 4 ran, 0 failed, 0 skipped" in out
    assert "2 left: run the same command again to continue" in out
    rc, out, _ = cli("leaderboard", "run", "--suite", str(d), "--adapter", "designed",
                     "--store", str(tmp_path / "s"))
    assert rc == 0 and "done: 2 ran, 0 failed, 4 skipped" in out and "run the same command again" not in out


def test_gpu_workers_may_outnumber_the_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    gpu = lb.load_suite(_suite(tmp_path, device="cuda"))
    ex = lb.suite_executor(gpu, "processes", 8)  # no process starts before run()
    assert ex.name == "processes" and ex.parallel == 8 and ex._pool is None
    with pytest.raises(ConfigError, match=r"--workers 9: is not allowed: must be in \[1, 8\] "
                                          r"\(4 per CPU, at most 32, for processes sharing the GPU\)"):
        lb.suite_executor(gpu, "processes", 9)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    with pytest.raises(ConfigError, match=rf"must be in \[1, {MAX_GPU_WORKERS}\]"):
        lb.suite_executor(gpu, "processes", MAX_GPU_WORKERS + 1)


def test_cpu_workers_are_bounded_by_the_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    cpu = lb.load_suite(_suite(tmp_path))
    assert lb.suite_executor(cpu, "processes", 2).parallel == 2
    with pytest.raises(ConfigError, match=r"--workers 3 is not allowed: must be in \[1, 2\]"):
        lb.suite_executor(cpu, "processes", 3)
    with pytest.raises(ConfigError, match="--executor: 'ray' is not allowed"):
        lb.suite_executor(cpu, "ray")


def test_a_cuda_suite_without_a_gpu_is_one_line(tmp_path, cli, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    d = _suite(tmp_path, device="cuda")
    rc, _, err = cli("leaderboard", "run", "--suite", str(d), "--adapter", "designed",
                     "--store", str(tmp_path / "s"), "--executor", "processes", "--workers", "2")
    assert rc == 2 and err.count("\n") == 1 and "no CUDA device is available here" in err
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_processes_run_resumes_without_redoing_points(tmp_path, cli_subprocess):
    d = _suite(tmp_path)
    args = ["leaderboard", "run", "--suite", str(d), "--adapter", "designed", "--store",
            str(tmp_path / "s"), "--executor", "processes", "--workers", "2"]
    rc, out, err = cli_subprocess(*args, "--limit", "3")
    assert rc == 0 and "[processes x2]" in out and "done: 3 ran" in out, err
    rc, out, err = cli_subprocess(*args)
    assert rc == 0 and "3 already in" in out and "done: 3 ran, 0 failed, 3 skipped" in out, err
    hashes = [r["config_hash"] for r in _lines(tmp_path / "s")]
    assert len(hashes) == 6 and len(set(hashes)) == 6


@pytest.mark.slow
def test_an_interrupted_processes_run_resumes(tmp_path, cli_subprocess):
    """SIGTERM while workers train: the finished points stay in the store, the workers
    stop, and the same command runs only the points that are missing."""
    d = _suite(tmp_path, num_facts=[2, 4, 8], seeds=[0, 1, 2],
               budgets=[{"name": "D8-N4", "model": {"d_model": 8, "d_state": 4, "n_layers": 1}}],
               train={"lr": 0.01, "max_steps": 60, "val_every": 20, "batch_size": 8,
                      "val_size": 16, "test_size": 64})
    store = tmp_path / "s"
    args = ["leaderboard", "run", "--suite", str(d), "--adapter", "linear-mamba", "--store",
            str(store), "--executor", "processes", "--workers", "2"]
    proc = subprocess.Popen([sys.executable, "-m", "recallbench.cli.main", *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if (store / "results.jsonl").is_file() and _lines(store):
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err)
    assert "the same command resumes from there" in err
    first = {r["config_hash"] for r in _lines(store)}
    assert len(first) in range(1, 9)  # some points finished, not all
    rc, out, err = cli_subprocess(*args)
    assert rc == 0 and f"{len(first)} already in" in out, err
    assert f"done: {9 - len(first)} ran, 0 failed, {len(first)} skipped" in out
    hashes = [r["config_hash"] for r in _lines(store)]
    assert len(hashes) == 9 and len(set(hashes)) == 9


def test_a_progress_line_gives_the_points_own_time_and_an_eta(tmp_path):
    """The time on a point's line is its own run's (its record's wall_s), not the wait since
    the line before; every line but the last says how long the rest will take."""
    from recallbench.harness.train import run
    from recallbench.runs.eta import remaining

    def runner(cfg, progress=False):
        return {**run(cfg, progress=False), "wall_s": 123.4}

    seen = []
    lb.run_suite(lb.load_suite(_suite(tmp_path)), "designed", tmp_path / "store",
                 runner=runner, log=seen.append)
    points = [line for line in seen if line.startswith("[")]
    assert len(points) == 6 and all(" in 123.4s" in line for line in points)
    assert all("left at this pace" in line for line in points[:-1])
    assert "left" not in points[-1]
    assert remaining(60.0, 2, 6) == "about 2.0 min left at this pace"
    assert remaining(0.0, 0, 6) == "ETA after the first point" and remaining(9.0, 6, 6) == ""
