"""The processes executor's per-point watchdog: a worker that does not report its point in
time is killed and replaced, the point retried once and then recorded failed with the
reason, while the other points complete; its flag's bad values are one line each."""
from __future__ import annotations

import os
import signal
import time

import pytest

from conftest import process_alive
import yaml

from recallbench.api.config import resolve
from recallbench.api.errors import ConfigError
from recallbench.runs import watchdog
from recallbench.runs.store import read_store

TASK = {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4}
TRAIN = {"max_steps": 0, "val_size": 16, "test_size": 16, "batch_size": 8, "progress": False}


def _config(seed: int, **train) -> dict:
    return resolve({"task": TASK, "model": {"adapter": "designed", "d_model": 8, "d_state": 4},
                    "train": {**TRAIN, "seed": seed, **train}}).to_dict()


def stop_self_on_seed_1(cfg, progress=False):
    """A runner (it runs in a worker) whose point of seed 1 stops its own process, as a
    SIGSTOP or a hang would; the others come back at once."""
    if cfg.train.seed == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    from recallbench.api.record import failed_record

    rec = failed_record(cfg, "not trained")  # a valid record of this config
    total = TRAIN["test_size"] * TASK["num_facts"]  # the queries this config tests
    return {**rec, "status": "ok", "correct": total // 2, "total": total, "accuracy": 0.5}


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


# -- the deadline ------------------------------------------------------------------------

def test_the_default_deadline_follows_the_step_cap():
    base = watchdog.START_S
    step = watchdog.MARGIN * watchdog.STEP_S
    assert watchdog.default_timeout([_config(0, max_steps=2000)]) == base + step * 2000
    assert watchdog.default_timeout([_config(0, max_steps=100, max_steps_limit=800)]) \
        == base + step * 800  # the final cap of a run that doubles its steps
    three_lrs = _config(0, max_steps=100, lr=[0.001, 0.003, 0.01])
    assert watchdog.default_timeout([three_lrs]) == base + step * 300
    assert watchdog.default_timeout([_config(0, max_steps=100)] * 4) == base + step * 400
    assert watchdog.item_timeout([_config(0, max_steps=10**6)], fixed=2.5) == 2.5
    assert "120 + 4 x steps x 0.05 s" in watchdog.HELP


@pytest.mark.parametrize("value,line", [
    (0, "--point-timeout 0: must be in [0.1, 1e7] seconds"),
    (float("nan"), "--point-timeout nan: must be in [0.1, 1e7] seconds"),
    (1e8, "--point-timeout 1e+08: must be in [0.1, 1e7] seconds"),
])
def test_bad_point_timeouts_are_refused(value, line):
    with pytest.raises(ConfigError) as exc:
        watchdog.check_point_timeout(value)
    assert str(exc.value) == line
    watchdog.check_point_timeout(0.1)  # the bounds themselves are allowed
    watchdog.check_point_timeout(1e7)


def test_the_sweep_flag_is_checked_before_anything_runs(cli, tmp_path):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "base": {"task": TASK, "model": {"adapter": "designed", "d_model": 8, "d_state": 4},
                 "train": TRAIN}, "axes": {"train.seed": [0, 1]}}))
    rc, out, err = cli("sweep", "s.yaml", "--store", "st", "--executor", "processes",
                       "--point-timeout", "-3")
    assert (rc, out) == (2, "")
    assert err == "recallbench: error: --point-timeout -3: must be in [0.1, 1e7] seconds\n"
    rc, out, err = cli("sweep", "s.yaml", "--store", "st", "--point-timeout", "30")
    assert rc == 2 and err == ("recallbench: error: --point-timeout is for --executor "
                               "processes (a worker it can kill)\n")
    assert not (tmp_path / "st").exists()


def test_the_flag_reaches_the_processes_executor(cli, tmp_path, monkeypatch):
    """`sweep --executor processes --point-timeout S` builds its executor with S (run here
    in-process, so no worker starts)."""
    from recallbench.runs import executors

    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "base": {"task": TASK, "model": {"adapter": "designed", "d_model": 8, "d_state": 4},
                 "train": TRAIN}, "axes": {"train.seed": [0, 1]}}))
    built = []
    real = executors.make_executor

    def spy(kind, **kw):
        built.append(real(kind, **kw))
        return executors.InProcess()

    monkeypatch.setattr(executors, "make_executor", spy)
    rc, out, err = cli("sweep", "s.yaml", "--store", "st", "--executor", "processes",
                       "--workers", "1", "--point-timeout", "2.5")
    assert rc == 0, err
    assert isinstance(built[0], executors.Processes) and built[0].point_timeout == 2.5
    assert built[0]._pool is None  # nothing started


def test_the_leaderboard_flag_is_checked_before_anything_runs(cli, tmp_path):
    rc, out, err = cli("leaderboard", "run", "--suite", "nowhere", "--adapter", "designed",
                       "--store", "st", "--executor", "processes", "--point-timeout", "0")
    assert rc == 2 and err == ("recallbench: error: --point-timeout 0: must be in "
                               "[0.1, 1e7] seconds\n")


# -- real workers ------------------------------------------------------------------------

@pytest.mark.slow
def test_a_hung_worker_is_killed_its_point_retried_once_then_failed(tmp_path):
    """Two workers, four points; the point of seed 1 stops its worker each time it runs.
    After 1.5 s that worker is killed and replaced, the point runs once more on the new
    one, is killed again, and is recorded failed with the reason; the others are ok."""
    from recallbench.runs.driver import Job, drive
    from recallbench.runs.executors import Processes
    from recallbench.runs.store import Store

    said: list[str] = []
    ex = Processes(2, notify=said.append, point_timeout=1.5, runner=stop_self_on_seed_1)
    jobs = [[Job(resolve(_config(s)))] for s in range(4)]
    pids: set[int] = set()

    def seen(job, record, tally):
        pids.update(w.pid for w in ex._pool.workers)

    start = time.monotonic()
    try:
        with Store(tmp_path / "st") as st:
            tally = drive(jobs, ex, st, on_record=seen)
        pids.update(w.pid for w in ex._pool.workers)
    finally:
        ex.close()
    took = time.monotonic() - start
    assert (tally.ran, tally.ok, tally.failed) == (4, 3, 1)
    by_seed = {r["seed"]: r for r in read_store(tmp_path / "st").records}
    assert sorted(by_seed) == [0, 1, 2, 3]
    assert by_seed[1]["status"] == "failed"
    assert by_seed[1]["error"] == ("worker failed: PointTimeout: no report within 1.5 s: "
                                   "killed (twice)")
    assert all(by_seed[s]["status"] == "ok" for s in (0, 2, 3))
    assert said == ["a worker had not reported within 1.5 s: killed and replaced; "
                    "the point runs once more"]
    assert len(pids) >= 3  # the two first workers, and at least the replacement
    assert not [p for p in pids if process_alive(p)], "a worker outlived close()"
    assert took < 120, f"took {took:.0f} s"
