"""Sweeps: expansion, skip rules, filters, sharding, failures, resume, executors, ensembles."""
import json
import os
import signal
import subprocess
import sys
import time
import types

import pytest
import torch
import yaml
from torch import nn

from recallbench.api.errors import ConfigError
from recallbench.runs.store import read_store
from recallbench.runs.filters import Condition
from recallbench.runs.sweep import Sweep, parse_shard, shard_points

TASK = {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4}
TRAIN = {"max_steps": 5, "val_every": 5, "val_size": 16, "test_size": 16, "batch_size": 16,
         "progress": False}


def base(adapter="linear-mamba", **train):
    return {"task": dict(TASK), "model": {"adapter": adapter, "d_model": 8, "d_state": 4},
            "train": {**TRAIN, **train}}


def write_sweep(path, data):
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def labels(exp):
    return [p.axes for p in exp.points]


# -- expansion --------------------------------------------------------------------------

def test_grid_skip_rules_and_filters():
    axes = {"model.d_model": [2, 4, 8], "model.d_state": [2, 4, 8], "train.seed": [0, 1]}
    exp = Sweep.from_dict({"base": base(), "axes": axes}).expand()
    assert exp.grid_size == 18
    assert exp.skipped == {"n_gt_d": 6}  # (2,4) (2,8) (4,8) × 2 seeds
    assert len(exp.points) == 12 and exp.duplicates == 0
    # deterministic order: the last axis varies fastest
    assert labels(exp)[:3] == [{"model.d_model": 2, "model.d_state": 2, "train.seed": 0},
                               {"model.d_model": 2, "model.d_state": 2, "train.seed": 1},
                               {"model.d_model": 4, "model.d_state": 2, "train.seed": 0}]
    again = Sweep.from_dict({"base": base(), "axes": axes}).expand()
    assert [p.hash for p in again.points] == [p.hash for p in exp.points]
    assert len({p.hash for p in exp.points}) == 12

    off = Sweep.from_dict({"base": base(), "axes": axes, "skip": {"n_gt_d": False}}).expand()
    assert len(off.points) == 18 and not off.skipped
    filt = Sweep.from_dict({"base": base(), "axes": axes, "skip": {"n_gt_d": False},
                            "where": ["model.d_state <= model.d_model", "train.seed == 1",
                                      "model.d_model > 2"]}).expand()
    assert len(filt.points) == 5  # (4,2) (4,4) (8,2) (8,4) (8,8), seed 1
    assert filt.skipped == {"model.d_state <= model.d_model": 6, "train.seed == 1": 6,
                            "model.d_model > 2": 1}
    # an axis over an unhashed key makes the same point twice: counted once
    dup = Sweep.from_dict({"base": base(), "axes": {"train.threads": [1, 2]}}).expand()
    assert len(dup.points) == 1 and dup.duplicates == 1


def test_seq_len_skip_rules():
    mqar = {"base": base(), "axes": {"task.num_facts": [2, 4, 5, 6]}}
    exp = Sweep.from_dict(mqar).expand()  # L = 16 < 4·5, 4·6: skipped before resolving
    assert [p.cfg.task.num_facts for p in exp.points] == [2, 4]
    assert exp.skipped == {"seq_len_lt_4nf": 2}
    with pytest.raises(ConfigError, match=r"point task.num_facts=5: task.seq_len") as info:
        Sweep.from_dict({**mqar, "skip": {"seq_len_lt_4nf": False}}).expand()
    assert "\n" not in str(info.value)

    rk = base()
    rk["task"] = {"name": "mqar-repeated-keys", "vocab_size": 64, "seq_len": 16, "num_facts": 2}
    exp = Sweep.from_dict({"base": rk, "axes": {"task.num_key_repeats": [1, 2, 3, 4]}}).expand()
    # needs L >= 2·N_f·(N_k+1): 8, 12, 16, 20
    assert [p.cfg.task.num_key_repeats for p in exp.points] == [1, 2, 3]
    ar = base()
    ar["task"] = {"name": "ar", "vocab_size": 32, "num_facts": 4}
    assert len(Sweep.from_dict({"base": ar, "axes": {"task.num_facts": [2, 4, 8]}}).expand().points) == 3


@pytest.fixture
def picky_task():
    """A test-only task whose infeasible() answers by N_f alone, unlike any built-in rule."""
    from recallbench.api.registry import TASKS

    class Picky(TASKS.get("mqar")):
        @classmethod
        def infeasible(cls, params):
            return {3: "seq_len_lt_4nf", 2: "no_such_rule"}.get(params.get("num_facts"))

    TASKS.add("test-picky", Picky)
    yield
    TASKS.remove("test-picky")


def test_task_skip_rule_is_the_task_classs_answer(picky_task):
    from recallbench.runs.sweep import skip_reason

    data = {"base": {**base(), "task": {**TASK, "name": "test-picky"}},
            "axes": {"task.num_facts": [1, 2, 3, 4]}}
    exp = Sweep.from_dict(data).expand()  # 3: the rule the sweep enables; 2: not a rule
    assert [p.cfg.task.num_facts for p in exp.points] == [1, 2, 4]
    assert exp.skipped == {"seq_len_lt_4nf": 1}
    off = Sweep.from_dict({**data, "skip": {"seq_len_lt_4nf": False}}).expand()
    assert len(off.points) == 4 and not off.skipped
    # a task that does not load skips nothing (its resolve error is reported instead)
    view = {"task": {"name": "no-such-task", "seq_len": 1, "num_facts": 99}, "model": {}}
    assert skip_reason(view, {"seq_len_lt_4nf": True, "n_gt_d": True}) is None


def test_axis_through_a_non_mapping_names_the_axis():
    data = {"base": {**base(), "model": {**base()["model"], "options": 3}},
            "axes": {"model.options.width": [1]}}
    with pytest.raises(ConfigError, match=r"axis 'model.options.width': options is not a mapping"):
        Sweep.from_dict(data).expand()


def test_driver_records_a_dead_worker_as_failed_and_appends_in_arrival_order():
    from recallbench.api.config import resolve
    from recallbench.runs.driver import Job, drive

    jobs = [Job(resolve({**base("designed"), "train": {**TRAIN, "seed": s}}), tag=s)
            for s in range(3)]
    ok = {"status": "ok", "config_hash": jobs[0].cfg.hash()}

    class Executor:  # the second item (two jobs) finishes first: its worker died
        def run(self, items):
            assert items == [[jobs[0].config], [jobs[1].config, jobs[2].config]]
            yield 1, RuntimeError("worker lost\ntraceback lines")
            yield 0, [ok]

    stored, seen = [], []
    store = types.SimpleNamespace(append=stored.append)
    tally = drive([[jobs[0]], jobs[1:]], Executor(), store,
                  lambda job, rec, t: seen.append((job.tag, rec["status"], t.ran)))
    assert seen == [(1, "failed", 1), (2, "failed", 2), (0, "ok", 3)]
    assert [r["error"] for r in stored[:2]] == ["worker failed: RuntimeError: worker lost"] * 2
    assert [r["config_hash"] for r in stored] == [j.cfg.hash() for j in (jobs[1], jobs[2], jobs[0])]
    assert stored[2] is ok and (tally.ran, tally.ok, tally.failed) == (3, 1, 2)


def test_zip_axes():
    data = {"base": base(), "axes": {"model.n_layers": [1, 2, 3], "model.d_state": [6, 3, 2],
                                     "train.seed": [0, 1]},
            "zip": [["model.n_layers", "model.d_state"]]}
    pts = Sweep.from_dict(data).expand().points
    got = [(p.cfg.model.n_layers, p.cfg.model.d_state, p.cfg.train.seed) for p in pts]
    assert got == [(1, 6, 0), (1, 6, 1), (2, 3, 0), (2, 3, 1), (3, 2, 0), (3, 2, 1)]
    with pytest.raises(ConfigError, match="equal lengths"):
        Sweep.from_dict({**data, "axes": {**data["axes"], "model.d_state": [6, 3]}})
    with pytest.raises(ConfigError, match="not an axis"):
        Sweep.from_dict({**data, "zip": [["model.n_layers", "model.d_conv"]]})


@pytest.mark.parametrize("data, match", [
    ({"axes": {"model.d_modle": [4]}}, r"point model.d_modle=4: .*d_modle"),
    ({"axes": {"model.head_pattern": ["mva", "xyz"]}}, r"point model.head_pattern=xyz: model.head_pattern"),
    ({"axes": {"model.d_model": [8, -1]}}, r"point model.d_model=-1"),
    ({"axes": {"modle.d_model": [8]}}, r"axis modle.d_model: unknown section"),
    ({"axes": {"model.d_model": 8}}, r"axis model.d_model = 8 .*non-empty list"),
    ({"axes": {"model.d_model": [8]}, "skip": {"n_gt_n": True}}, r"unknown skip rule 'n_gt_n'"),
    ({"axes": {}, "where": ["__import__('os').system('x') == 1"]}, r"not a comparison|cannot read"),
    ({"axes": {}, "where": ["model.d_state <= model.d_model + 1"]}, r"not a comparison"),
    ({"axes": {}, "where": ["3 < 4"]}, r"two literals"),
    ({"axes": {}, "where": ["model.d_stat <= 4"]}, r"model.d_stat is not a config key"),
    ({"axes": {}, "where": ["model.adapter < 4"]}, r"cannot order"),
    ({"axes": {}, "bases": {}}, r"unknown key 'bases'"),
])
def test_bad_sweep_is_one_line(data, match):
    with pytest.raises(ConfigError, match=match) as info:
        Sweep.from_dict({"base": base(), **data}).expand()
    assert "\n" not in str(info.value)


def test_where_parser_is_not_eval():
    view = {"model": {"d_model": 8, "d_state": 4, "adapter": "designed", "options": {}},
            "train": {"lr": 0.01, "early_stop": None}}
    assert Condition.parse("model.d_state <= model.d_model").holds(view)
    assert Condition.parse("model.d_model==8").holds(view)
    assert Condition.parse("train.lr < 1e-1").holds(view)
    assert Condition.parse("model.adapter == designed").holds(view)
    assert Condition.parse("model.adapter != 'linear-mamba'").holds(view)
    assert Condition.parse("train.early_stop == null").holds(view)
    assert Condition.parse("model.options.residual == null").holds(view)  # unset option
    assert not Condition.parse("model.d_model > 8").holds(view)
    heads = {"base": base(), "axes": {"model.n_heads": [1, 2], "model.head_pattern": ["mha", "mva"]},
             "where": [{"any": ["model.n_heads > 1", "model.head_pattern == mva"]}]}
    exp = Sweep.from_dict(heads).expand()
    assert [(p.cfg.model.n_heads, p.cfg.model.head_pattern) for p in exp.points] == [
        (1, "mva"), (2, "mha"), (2, "mva")]
    assert exp.skipped == {"any(model.n_heads > 1; model.head_pattern == mva)": 1}
    with pytest.raises(ConfigError, match="where.0..any.1.: 'oops' is not a comparison"):
        Sweep.from_dict({**heads, "where": [{"any": ["model.n_heads > 1", "oops"]}]})


def test_shards_are_disjoint_balanced_and_cover():
    exp = Sweep.from_dict({"base": base(), "axes": {"train.seed": list(range(11))}}).expand()
    shards = [shard_points(exp.points, (i, 3)) for i in range(3)]
    hashes = [p.hash for s in shards for p in s]
    assert sorted(hashes) == sorted(p.hash for p in exp.points)
    assert sorted(len(s) for s in shards) == [3, 4, 4]
    assert parse_shard("1/3") == (1, 3)
    for bad in ("3/3", "1", "-1/2", "a/b"):
        with pytest.raises(ConfigError, match="--shard"):
            parse_shard(bad)


def test_point_config_round_trips():
    from recallbench.api.config import resolve

    for p in Sweep.from_dict({"base": base(), "axes": {"model.d_state": [2, 4]}}).expand().points:
        assert resolve(p.config).hash() == p.hash


# -- running ----------------------------------------------------------------------------

def test_cli_bad_sweep_stops_before_work(cli, tmp_path):
    path = write_sweep(tmp_path / "bad.yaml", {"base": base(), "axes": {
        "train.seed": [0, 1], "model.head_pattern": ["mva", "nope"]}})
    rc, out, err = cli("sweep", path, "--store", "st")
    assert rc == 2 and err.count("\n") == 1 and "model.head_pattern=nope" in err
    assert not (tmp_path / "st").exists()
    rc, out, err = cli("sweep", str(tmp_path / "missing.yaml"), "--store", "st")
    assert rc == 2 and "cannot read" in err
    rc, out, err = cli("sweep", write_sweep(tmp_path / "ok.yaml", {"base": base()}))
    assert rc == 2 and "--store" in err


def test_dry_run_and_rerun_skips_done(cli, tmp_path):
    path = write_sweep(tmp_path / "s.yaml", {"base": base("designed"), "axes": {
        "model.d_model": [4, 8], "model.d_state": [2, 4, 8], "train.seed": [0, 1]}})
    rc, out, err = cli("sweep", path, "--dry-run")
    assert rc == 0 and "grid 12 cells, 10 points (skipped: 2 by n_gt_d)" in out
    assert len([ln for ln in out.splitlines() if ln.startswith("  ")]) == 10
    rc, out, err = cli("sweep", path, "--store", "st", "--limit", "4")
    assert rc == 0, err
    assert "10 points" in out and "4 to run (--limit 4)" in out
    assert "[ 4/10] ok" in out and "ETA" in out
    rc, out, err = cli("sweep", path, "--store", "st", "--dry-run")
    assert "4 ok, 6 pending" in out
    rc, out, err = cli("sweep", path, "--store", "st")
    assert rc == 0 and "4 done; 6 to run" in out and "[10/10] ok" in out
    lines = (tmp_path / "st" / "results.jsonl").read_text().splitlines()
    rc, out, err = cli("sweep", path, "--store", "st")
    assert rc == 0 and "10 done; 0 to run" in out
    assert (tmp_path / "st" / "results.jsonl").read_text().splitlines() == lines
    assert len(lines) == 10


@pytest.fixture
def broken_adapters():
    """Two test-only adapters: one raises while building, one makes the loss NaN."""
    from recallbench.api.adapter import Adapter
    from recallbench.api.registry import ADAPTERS

    class Nan(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, x):
            return x * self.w * float("nan")

    class Explode(Adapter):
        def build_blocks(self, device):
            raise RuntimeError("boom: this adapter always fails\nsecond line")

        def state_size(self):
            return 1

    class Diverge(Adapter):
        def build_blocks(self, device):
            return nn.ModuleList([Nan()])

        def state_size(self):
            return 1

    ADAPTERS.add("test-explode", Explode, origin="test")
    ADAPTERS.add("test-diverge", Diverge, origin="test")
    yield
    for name in ("test-explode", "test-diverge"):
        ADAPTERS.remove(name)


def test_failing_points_are_recorded_and_the_sweep_goes_on(cli, tmp_path, broken_adapters):
    path = write_sweep(tmp_path / "s.yaml", {"base": base(), "axes": {
        "model.adapter": ["test-explode", "linear-mamba", "test-diverge", "designed"]}})
    rc, out, err = cli("sweep", path, "--store", "st")
    assert rc == 1, err
    recs = {r["config"]["model"]["adapter"]: r for r in read_store(tmp_path / "st").records}
    assert len(recs) == 4
    assert recs["linear-mamba"]["status"] == "ok" and recs["designed"]["status"] == "ok"
    assert recs["test-explode"]["status"] == "failed"
    assert recs["test-explode"]["error"] == "RuntimeError: boom: this adapter always fails"
    assert recs["test-diverge"]["status"] == "failed"
    assert "DivergedError" in recs["test-diverge"]["error"]
    assert "[4/4] ok" in out and "failed 2" in out and "FAILED RuntimeError: boom" in out
    # a rerun retries the failed points only (unless --no-retry-failed)
    rc, out, err = cli("sweep", path, "--store", "st", "--no-retry-failed")
    assert rc == 0 and "0 to run" in out
    rc, out, err = cli("sweep", path, "--store", "st")
    assert rc == 1 and "2 failed before (retrying); 2 to run" in out
    contents = read_store(tmp_path / "st")
    assert len(contents.records) == 4 and contents.read == 6 and contents.duplicates == 2


@pytest.mark.slow
def test_resume_after_kill(tmp_path):
    """SIGKILL a sweep mid-way, rerun it: every point exactly once, nothing lost."""
    path = write_sweep(tmp_path / "s.yaml", {"base": base(max_steps=20, val_every=10), "axes": {
        "model.d_state": [2, 4], "train.seed": list(range(6))}})
    store = tmp_path / "st"
    results = store / "results.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "recallbench.cli.main", "sweep", path,
                             "--store", str(store)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and results.read_bytes().count(b"\n") >= 3:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the sweep finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    first = read_store(store).records
    assert 3 <= len(first) < 12
    from recallbench.cli.main import main

    assert main(["sweep", path, "--store", str(store)]) == 0
    contents = read_store(store)
    assert len(contents.records) == 12 and contents.duplicates == 0 and not contents.torn
    assert all(r["status"] == "ok" for r in contents.records)
    ok_lines = [json.loads(ln) for ln in results.read_text().splitlines()]
    assert len(ok_lines) == 12  # none twice
    assert {r["config_hash"] for r in first} <= {r["config_hash"] for r in ok_lines}


@pytest.mark.slow
def test_processes_executor_matches_inprocess(cli, tmp_path):
    path = write_sweep(tmp_path / "s.yaml", {"base": base(), "axes": {
        "model.d_state": [2, 4], "train.seed": [0, 1]}})
    rc, out, err = cli("sweep", path, "--store", "a", "--executor", "processes", "--workers", "2")
    assert rc == 0, err
    assert "[processes x2]" in out and "[4/4]" in out
    rc, out, err = cli("sweep", path, "--store", "b")
    assert rc == 0, err
    a = {r["config_hash"]: r for r in read_store(tmp_path / "a").records}
    b = {r["config_hash"]: r for r in read_store(tmp_path / "b").records}
    assert a.keys() == b.keys() and len(a) == 4
    assert all(r["threads"] == 1 for r in a.values())
    assert {h: r["accuracy"] for h, r in a.items()} == {h: r["accuracy"] for h, r in b.items()}


@pytest.mark.slow
def test_processes_pool_is_kept_between_calls_until_close():
    """An adaptive search calls run() once a round: the workers must not respawn each time."""
    from recallbench.api.config import resolve
    from recallbench.runs.executors import Processes

    cfgs = [resolve({**base("designed"), "train": {**TRAIN, "seed": s}}).to_dict()
            for s in range(3)]
    ex = Processes(workers=2)
    try:
        first = dict(ex.run([[c] for c in cfgs[:2]]))
        pool = ex._pool
        assert pool is not None
        second = dict(ex.run([[cfgs[2]]]))
        assert ex._pool is pool  # the same workers served the second call
        assert [r[0]["status"] for r in (*first.values(), *second.values())] == ["ok"] * 3
        it = ex.run([[c] for c in cfgs])
        next(it)
        it.close()  # the caller stops early: queued work is dropped with the pool
        assert ex._pool is None
    finally:
        ex.close()
    assert ex._pool is None


@pytest.mark.slow
def test_ray_executor(cli, tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'recallbench[ray]')")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local instance, whatever else runs
    path = write_sweep(tmp_path / "s.yaml", {"base": base(), "axes": {
        "model.d_state": [2, 4], "train.seed": [0, 1]}})
    rc, out, err = cli("sweep", path, "--store", "st", "--executor", "ray", "--workers", "2")
    assert rc == 0, err + out
    contents = read_store(tmp_path / "st")
    assert len(contents.records) == 4 and all(r["status"] == "ok" for r in contents.records)
    assert "[ray x2]" in out


@pytest.mark.parametrize("address, message", [
    ("free-port", "nothing answers there (ConnectionRefusedError"),
    ("127.0.0.1:http", "need host:port with a port in [1, 65535]"),
])
def test_ray_unreachable_address_is_one_line(cli, tmp_path, address, message):
    """Ray itself can wait minutes on a dead address; the sweep says so at once."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'recallbench[ray]')")
    import socket

    if address == "free-port":
        with socket.socket() as s:  # a port that was free a moment ago: nothing listens
            s.bind(("127.0.0.1", 0))
            address = f"127.0.0.1:{s.getsockname()[1]}"
    path = write_sweep(tmp_path / "s.yaml", {"base": base(), "axes": {"train.seed": [0, 1]}})
    rc, out, err = cli("sweep", path, "--store", "st", "--executor", "ray", "--address", address)
    assert rc == 2 and f"--address {address!r}" in err and message in err
    assert err.count("\n") == 1
    assert not read_store(tmp_path / "st").records


def test_ensemble_groups_by_shape(cli, tmp_path, monkeypatch):
    path = write_sweep(tmp_path / "s.yaml", {"base": base("designed"), "axes": {
        "model.d_model": [4, 8], "train.seed": [0, 1, 2]}})
    monkeypatch.setitem(sys.modules, "recallbench.harness.ensemble", None)
    rc, out, err = cli("sweep", path, "--store", "st", "--ensemble", "2")
    assert rc == 2 and "--ensemble needs recallbench.harness.ensemble" in err and err.count("\n") == 1

    batches = []
    from recallbench.harness.train import run

    def run_ensemble(configs, progress=False):
        batches.append([(c.model.d_model, c.train.seed) for c in configs])
        return [run(c, progress=False) for c in configs]

    fake = types.SimpleNamespace(run_ensemble=run_ensemble,
                                 shape_key=lambda cfg: f"D{cfg.model.d_model}")
    monkeypatch.setitem(sys.modules, "recallbench.harness.ensemble", fake)
    rc, out, err = cli("sweep", path, "--store", "st", "--ensemble", "2")
    assert rc == 0, err
    assert batches == [[(4, 0), (4, 1)], [(4, 2)], [(8, 0), (8, 1)], [(8, 2)]]
    assert len(read_store(tmp_path / "st").records) == 6 and "4 batches" in out


@pytest.mark.parametrize("name, points", [
    ("dn_mqar_linear", 38), ("dn_ar_linear", 38), ("layers_mqar", 20), ("heads_mqar", 27),
    ("repeated_keys", 12)])
def test_shipped_sweep_files_expand(repo_root, name, points):
    from recallbench.runs.sweep import load_sweep

    exp = load_sweep(repo_root / "sweeps" / f"{name}.yaml").expand()
    assert len(exp.points) == points and exp.duplicates == 0


@pytest.mark.parametrize("name, store, points", [
    ("dn_mqar", "dn_mqar", 57), ("dn_ar", "dn_ar", 57), ("layers_mqar", "layers_mqar", 60),
    ("heads_mqar", "heads_mqar", 30), ("repeated_keys", "repeated_keys", 24),
    ("layers_paper_points", "layers_paper_points", 8),
    ("layers_paper_diagonals", "layers_paper_points", 6), ("dn_mamba", "dn_mamba", 27)])
def test_committed_studies_hold_every_point_of_their_sweep_file(repo_root, name, store, points):
    """docs/results/*/store answers its sweeps/cpu file: a rerun would run nothing."""
    from recallbench.runs.store import read_store
    from recallbench.runs.sweep import load_sweep

    exp = load_sweep(repo_root / "sweeps" / "cpu" / f"{name}.yaml").expand()
    contents = read_store(repo_root / "docs" / "results" / store / "store")
    ok = {r["config_hash"] for r in contents.records if r.get("status") == "ok"}
    assert len(exp.points) == points and not contents.torn
    assert [p.label() for p in exp.points if p.hash not in ok] == []


def test_ctrl_c_stops_the_sweep_says_so_and_keeps_finished_points(cli, tmp_path, monkeypatch):
    """Lightning turns Ctrl-C into sys.exit(1) and ignores SIGINT afterwards; the sweep must
    instead stop with exit 130 and a one-line message, keep what finished, and leave
    Ctrl-C working (a pytest session calling recallbench can still be interrupted)."""
    from recallbench.harness.module import RecallModule

    real_step, calls = RecallModule.training_step, []

    def step(self, batch, batch_idx):
        calls.append(batch_idx)
        if len(calls) == TRAIN["max_steps"] + 2:  # two steps into the second point
            raise KeyboardInterrupt
        return real_step(self, batch, batch_idx)

    monkeypatch.setattr(RecallModule, "training_step", step)
    handler = signal.getsignal(signal.SIGINT)
    path = write_sweep(tmp_path / "s.yaml", {"base": base(), "axes": {"train.seed": [0, 1, 2]}})
    rc, out, err = cli("sweep", path, "--store", "st")
    assert rc == 130 and "interrupted" in err and "resumes" in err and err.count("\n") == 1
    assert signal.getsignal(signal.SIGINT) is handler
    assert [r["status"] for r in read_store(tmp_path / "st").records] == ["ok"]
    monkeypatch.setattr(RecallModule, "training_step", real_step)
    rc, out, err = cli("sweep", path, "--store", "st")  # the rerun runs the other two
    assert rc == 0 and "1 done; 2 to run" in out
    assert sorted(r["config"]["train"]["seed"] for r in read_store(tmp_path / "st").records) \
        == [0, 1, 2]
