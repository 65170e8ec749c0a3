"""A capacity suite's cards on a Ray cluster (``leaderboard run --executor ray``): the same
cards as a local run from the same seeds, with a node lost midway; and the flags' checks.

The cluster is tests/test_ray_cluster.py's: a head and a second node on this machine, one CPU
each, token auth; the second is killed while it runs one of the board's runs.  The suite is
tests/test_capacity_suite_v2.py's (card method 2, the designed model: real records without
training), its evaluation sets large enough that a run lasts about a second.
"""
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from recallbench import leaderboard as lb
from recallbench.leaderboard.capacity import method2
from recallbench.leaderboard.capacity.suite import budget_base
from test_capacity_suite_v2 import _suite_dir
from test_leaderboard_tamper import _assert_one_line

ROOT = Path(__file__).resolve().parent.parent
#: evaluation sequences of each run: a designed run then takes about a second
EVAL = 16384


def _slow_suite(root: Path) -> Path:
    d = _suite_dir(root)
    data = yaml.safe_load((d / "suite.yaml").read_text())
    data["train"].update(val_size=EVAL, test_size=EVAL)
    (d / "suite.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    return d


def _records(store: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(store.glob("*.jsonl"))
            for line in f.read_text().splitlines() if line.strip()]


def _card(suite_dir: Path, store: Path) -> dict:
    """The card the store's runs make (what ``submit`` writes): the search replayed."""
    suite = lb.load_suite(suite_dir)
    base = budget_base(suite, "designed", suite.budgets[0])
    return method2.replay(suite, base, _records(store)).card


def _board(cwd: Path, env: dict, *args: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "recallbench.cli.main", "leaderboard", "run",
                           "--adapter", "designed", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.slow
def test_a_board_on_two_nodes_one_lost_makes_the_local_cards(tmp_path):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'recallbench[ray]')")
    from test_ray_cluster import session_processes, start_cluster

    d = _slow_suite(tmp_path)
    c = start_cluster(second=())
    try:
        second = [n for n, info in c.nodes().items() if not info["head"]][0]
        store = tmp_path / "on_ray"
        killed = threading.Event()

        def kill_midway():  # once a batch is stored, while the second node runs a card's run
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                if store.is_dir() and len(_records(store)) >= 2:
                    running = session_processes(c.sessions["second"]).values()
                    if any(cmd.startswith("ray::_ray_task") for cmd in running):
                        c.kill("second")
                        killed.set()
                        return
                time.sleep(0.05)

        watcher = threading.Thread(target=kill_midway, daemon=True)
        watcher.start()
        rc, out, err = _board(tmp_path, c.env, "--suite", str(d), "--store", str(store),
                              "--executor", "ray", "--address", c.address)
        watcher.join(timeout=5)
        assert rc == 0, err + out
        assert f"runs on ray@{c.address}, 2 at once" in out
        assert killed.is_set(), "no run was on the second node after the first batch"
        gone = time.monotonic() + 60  # the head's GCS marks a killed node dead after its
        while c.nodes()[second]["alive"] and time.monotonic() < gone:  # health checks fail
            time.sleep(1)
        assert not c.nodes()[second]["alive"]
        on_ray = _records(store)
        nodes = {r["node"]["ray_node_id"] for r in on_ray}
        print("runs per node:", {n[:8]: sum(r["node"]["ray_node_id"] == n for r in on_ray)
                                 for n in nodes})
        assert nodes <= set(c.nodes())  # the killed node's finished runs kept, if any
        # nothing doubled, nothing lost stored: one ok record per run
        assert all(r["status"] == "ok" for r in on_ray)
        hashes = [r["config_hash"] for r in on_ray]
        assert len(hashes) == len(set(hashes))
        # the same command again: every card from the store, nothing trained
        rc, out, err = _board(tmp_path, c.env, "--suite", str(d), "--store", str(store),
                              "--executor", "ray", "--address", c.address)
        assert rc == 0 and "(from the store)" in out and "seeds " not in out, err + out
        assert len(_records(store)) == len(on_ray)
    finally:
        c.close()
    local = tmp_path / "local"
    rc, out, err = _board(tmp_path, None, "--suite", str(d), "--store", str(local))
    assert rc == 0, err + out
    assert sorted(hashes) == sorted(r["config_hash"] for r in _records(local))
    a, b = _card(d, store), _card(d, local)
    assert a["status"] == b["status"] == "measured"
    assert a["n50"] == b["n50"] and a["stopped"] == b["stopped"]
    timing = ("cpu_s", "wall_s")  # what a run cost where it ran: the rest is its result
    assert ([{k: v for k, v in r.items() if k not in timing} for r in a["runs"]]
            == [{k: v for k, v in r.items() if k not in timing} for r in b["runs"]])


# -- without a cluster ----------------------------------------------------------------------

def _grid_suite(root: Path) -> Path:
    """cpu-small's grid, open."""
    d = root / "cpu-small"
    (d / "submissions").mkdir(parents=True)
    data = yaml.safe_load((ROOT / "leaderboards" / "cpu-small" / "suite.yaml").read_text())
    data.pop("retired", None)
    (d / "suite.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    return d


def test_ray_flags_are_checked_in_one_line(cli, tmp_path):
    cap = _suite_dir(tmp_path)
    run = ("leaderboard", "run", "--adapter", "designed", "--store", "st")
    rc, out, err = cli(*run, "--suite", str(cap), "--address", "127.0.0.1:6379")
    _assert_one_line(rc, err, "--address", "--address is for --executor ray")
    rc, out, err = cli(*run, "--suite", str(cap), "--executor", "processes",
                       "--address", "auto")
    _assert_one_line(rc, err, "--address", "--address is for --executor ray")
    rc, out, err = cli(*run, "--suite", str(cap), "--executor", "ray", "--point-timeout", "60")
    _assert_one_line(rc, err, "--point-timeout", "is for --executor processes")
    grid = _grid_suite(tmp_path)
    rc, out, err = cli(*run, "--suite", str(grid), "--executor", "ray")
    _assert_one_line(rc, err, "--executor ray",
                     f"--executor ray is for a capacity suite; {lb.load_suite(grid).name} is "
                     "a grid suite")
    assert not (tmp_path / "st").exists()  # nothing ran
    card = ("capacity", "--adapter", "designed", "--d-model", "32", "--d-state", "8",
            "--out", "card")
    rc, out, err = cli(*card, "--address", "auto")
    _assert_one_line(rc, err, "--address", "--address is for --executor ray")
    rc, out, err = cli(*card, "--executor", "ray", "--shapes", "key=4,8")
    _assert_one_line(rc, err, "--executor ray", "--executor ray is for one card, not --shapes")
    assert not (tmp_path / "card").exists()


class _LosesFirst:
    """In this process, but each run's first ``times`` tries come back lost with their node,
    as the Ray executor returns a task Ray gave up on (status failed, ``node`` null)."""

    name, parallel, runner = "lossy", 1, None

    def __init__(self, times: int):
        from recallbench.runs.executors import InProcess

        self.inner, self.times, self.tries = InProcess(), times, {}

    def run(self, items, gate=None):
        from recallbench.api.canonical import config_hash
        from recallbench.api.config import resolve
        from recallbench.api.record import failed_record

        for i, item in enumerate(items):
            key = config_hash(item[0])
            self.tries[key] = self.tries.get(key, 0) + 1
            if self.tries[key] <= self.times:
                lost = failed_record(resolve(item[0]), "ray task failed: the node died")
                yield i, [{**lost, "node": None}]
            else:
                yield i, next(self.inner.run([item]))[1]

    def close(self):
        raise AssertionError("trained closes only an executor of its own")


def _cell(tmp_path, seeds=(0, 1)) -> list[dict]:
    from recallbench.runs.capacity import cell_config

    suite = lb.load_suite(_suite_dir(tmp_path))
    base = budget_base(suite, "designed", suite.budgets[0])
    return [cell_config(base, 9, s) for s in seeds]


def test_a_run_lost_with_its_node_runs_once_more_and_is_stored_once(tmp_path):
    from recallbench.runs.capacity import trained

    cfgs, said, ex = _cell(tmp_path), [], _LosesFirst(1)
    with trained(tmp_path / "st", executor=ex, say=said.append) as (done, run_cell):
        got = run_cell(cfgs)
    assert [r["status"] for r in got] == ["ok", "ok"] and set(ex.tries.values()) == {2}
    assert said == ["2 run(s) lost with their node (ray task failed: the node died): they "
                    "run once more"]
    stored = _records(tmp_path / "st")
    assert sorted(r["config_hash"] for r in stored) == sorted(r["config_hash"] for r in got)
    # a rerun takes both from the store
    with trained(tmp_path / "st", executor=_LosesFirst(0)) as (done, run_cell):
        assert set(done) == {r["config_hash"] for r in got}


def test_a_run_lost_twice_stops_the_card_and_stores_nothing(tmp_path):
    from recallbench.api.errors import UnavailableError
    from recallbench.runs.capacity import trained

    cfgs, ex = _cell(tmp_path, seeds=(0,)), _LosesFirst(2)
    with pytest.raises(UnavailableError) as info:
        with trained(tmp_path / "st", executor=ex) as (done, run_cell):
            run_cell(cfgs)
    assert str(info.value) == ("1 run(s) lost with their node twice (ray task failed: the node "
                               "died); not stored: the same command resumes from the store")
    assert not _records(tmp_path / "st")
