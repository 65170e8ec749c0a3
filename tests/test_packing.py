"""Packed execution (recallbench.runs.packing): how many runs at once, and records equal to
the ones a run trains alone in one process."""
import pytest

from recallbench.api.config import resolve
from recallbench.harness.train import run
from recallbench.runs import packing
from recallbench.runs.gpu_share import CONTEXT_BYTES

TASK = {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4}
MODEL = {"adapter": "linear-mamba", "d_model": 8, "d_state": 4}
TRAIN = {"batch_size": 16, "val_every": 5, "val_size": 32, "test_size": 32, "patience": 2,
         "early_stop": 0.999, "progress": False, "threads": 1, "device": "cpu"}
#: record fields that are timings or where the run ran, not what it trained
TIMING = {"train_s", "wall_s", "cpu_s", "threads", "node", "provenance", "versions"}


def config(seed=0, **train):
    return resolve({"task": TASK, "model": MODEL,
                    "train": {**TRAIN, "seed": seed, **train}}).to_dict()


def trained_fields(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in TIMING}


def test_split_tasks_in_this_process_make_the_search_record():
    """The split search's tasks called here, in candidate order reversed (as workers may
    finish them), then the chosen one finished: lr_search's record, field by field."""
    from recallbench.harness.lr_candidates import choose
    from recallbench.runs import packed_tasks

    raw = config(0, lr=[1e-7, 3e-2, 1e-2], max_steps=10, max_steps_limit=40)
    entries, train_s = [None] * 3, 0.0
    for j in (2, 1, 0):
        out = packed_tasks.candidate(raw, j, f"k{j}", threads=1)
        entries[j], train_s = out["entry"], train_s + out["train_s"]
    b = choose(entries)
    assert b != 0 and packed_tasks.held() == ["k0", "k1", "k2"]  # each kept until chosen
    rec = packed_tasks.finish(raw, f"k{b}", entries, b, train_s, threads=1)
    packed_tasks.drop(["k0", "k1", "k2"])
    assert packed_tasks.held() == []
    assert trained_fields(rec) == trained_fields(run(raw))


@pytest.mark.slow
def test_split_search_equals_the_one_process_search():
    """A search with a limit, its candidates in four workers at once, then the chosen one
    extended where it was kept: the record lr_search makes in one process, field by field
    (the lr 1e-7 stays at the guess level, so the choice is not a tie)."""
    cfgs = [config(s, lr=[1e-7, 3e-2, 1e-2], max_steps=10, max_steps_limit=40) for s in (0, 1)]
    alone = [run(c) for c in cfgs]
    ex = packing.Packed(workers=4, say=None, spread=True)  # as on a GPU: split
    try:
        got = dict(ex.run(cfgs))
    finally:
        ex.close()
    assert sorted(got) == [0, 1]
    assert (ex.tasks["candidate"], ex.tasks["finish"]) == (6, 2)  # split: 2 runs x 3 lrs
    for i, rec in got.items():
        assert rec["status"] == "ok", rec.get("error")
        assert trained_fields(rec) == trained_fields(alone[i])
        assert rec["cpu_s"] > 0 and rec["wall_s"] > 0
    # the search was extended past its cap somewhere, or the test proves less than it says
    assert any(r["steps"] > 10 for r in alone)


@pytest.mark.slow
def test_a_failing_run_fails_alone_and_the_pool_goes_on():
    """A run whose memory estimate is refused gets a failed record naming why; the other
    run's record is the one-process run's; the workers are reused by the next call."""
    good = config(0, lr=[3e-2, 1e-2], max_steps=5, max_steps_limit=10)
    bad = config(1, lr=[3e-2, 1e-2], max_steps=5, max_steps_limit=10)
    bad["task"]["vocab_size"], bad["model"]["d_model"] = 2 ** 24, 4096  # ~TBs of weights
    ex = packing.Packed(workers=2, say=None)
    try:
        got = dict(ex.run([good, bad]))
        assert ex.tasks == {"whole": 2}  # as many runs as workers: whole runs
        pids = sorted(w.pid for w in ex.pool.workers)
        again = dict(ex.run([config(2, lr=0.01, max_steps=5)]))
        assert sorted(w.pid for w in ex.pool.workers) == pids  # kept, not restarted
    finally:
        ex.close()
    assert got[1]["status"] == "failed" and "task.vocab_size" in got[1]["error"]
    assert trained_fields(got[0]) == trained_fields(run(good))
    assert again[0]["status"] == "ok"
    assert trained_fields(again[0]) == trained_fields(run(config(2, lr=0.01, max_steps=5)))


def cfg_of(**train):
    return resolve(config(0, lr=[1e-3, 1e-2, 3e-2], max_steps=10, max_steps_limit=40, **train))


def test_plan_on_a_cpu_is_bounded_by_tasks_cpus_and_memory():
    cfgs = [cfg_of(), cfg_of()]
    host_each = packing.PROCESS_BYTES + sum(packing.run_bytes(cfgs[0]))
    p = packing.plan(cfgs, cpus=64, host_free=100 * host_each)
    assert (p.runs, p.bound, p.wanted) == (6, "the batch's tasks", 6)  # 2 runs x 3 lrs
    assert packing.plan(cfgs, cpus=2, host_free=100 * host_each).runs == 2
    p = packing.plan(cfgs, cpus=64, host_free=3 * host_each + 1)
    assert (p.runs, p.bound) == (3, "memory")
    assert "3 run(s) at once on cpu (bound by memory)" in p.line()
    # a search without a limit is one task of K members (the ensemble's memory)
    whole = resolve(config(0, lr=[1e-3, 1e-2], max_steps=10))
    assert packing.plan([whole], cpus=8, host_free=10 ** 12).wanted == 1
    assert packing.run_bytes(whole)[0] > packing.run_bytes(cfgs[0])[0]


def test_plan_on_a_gpu_counts_a_context_and_the_device_parts(monkeypatch):
    from recallbench.runs import gpu_share

    monkeypatch.setattr(gpu_share, "uses_gpu", lambda devices: "cuda")
    cfgs = [cfg_of(device="cuda")] * 8  # 24 candidates
    dev, _ = packing.run_bytes(cfgs[0])
    p = packing.plan(cfgs, cpus=16, free=5 * (CONTEXT_BYTES + dev) + 7, host_free=10 ** 13)
    assert (p.runs, p.bound, p.per_run) == (5, "memory", CONTEXT_BYTES + dev)
    p = packing.plan(cfgs, cpus=16, free=10 ** 13, host_free=10 ** 13)
    assert (p.runs, p.bound) == (16, "the CPUs")
    assert "GPU memory free" in p.line()


@pytest.mark.slow
def test_budget_spent_stops_the_batch():
    from recallbench.runs.budget import BudgetSpent, Limit
    import time

    cfgs = [config(s, lr=[3e-2, 1e-2], max_steps=4000, max_steps_limit=8000,
                   early_stop=None, patience=1000) for s in (0, 1)]
    ex = packing.Packed(workers=3, say=None)
    t0 = time.monotonic()
    try:
        with pytest.raises(BudgetSpent):
            list(ex.run(cfgs, Limit(wall_until=time.time() + 3)))
        assert ex.pool is None  # the workers were stopped
    finally:
        ex.close()
    assert time.monotonic() - t0 < 60
