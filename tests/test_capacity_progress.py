"""Progress lines while a capacity batch trains (recallbench.runs.progress): run k of n, the
learning rate and its candidate, the step, an ETA; in this process and from worker
processes; the records the same with and without them."""
import re
import tempfile

import pytest
import torch

from recallbench.api.config import resolve
from recallbench.harness import lr_search
from recallbench.runs import capacity, progress
from recallbench.runs.executors import InProcess, Processes

BASE = {"task": {"name": "mqar", "vocab_size": 32},
        "model": {"adapter": "linear-mamba", "d_model": 8, "d_state": 4},
        "train": {"lr": [0.003, 0.01], "max_steps": 20, "max_steps_limit": 40,
                  "batch_size": 16, "val_every": 10, "val_size": 32, "test_size": 32,
                  "early_stop": None, "patience": None, "progress": False, "threads": 1}}
#: what a run's record must keep with and without progress lines
KEPT = ("status", "config_hash", "accuracy", "correct", "total", "steps", "lr", "lr_search",
        "val_accuracy", "best_step", "extended", "max_steps_reached")


def cells(num_facts=4, seeds=(0, 1)):
    return [capacity.cell_config(BASE, num_facts, s) for s in seeds]


def kept(records):
    """The kept fields, in config-hash order (worker processes finish in any order)."""
    return sorted(({k: r.get(k) for k in KEPT} for r in records),
                  key=lambda r: r["config_hash"])


@pytest.fixture
def every_step(monkeypatch, tmp_path):
    """A status after every step, a line at every look, a look every 10 ms; the progress
    directory under ``tmp_path/tmp`` (checked empty afterwards)."""
    monkeypatch.setattr(progress, "REPORT_S", 0.0)
    monkeypatch.setattr(progress, "SAY_S", 0.0)
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


def train(store, workers, say=None):
    with capacity.trained(store, workers, say=say) as (_, run_cell):
        return run_cell(cells())


def check_lines(lines):
    text = "\n".join(lines)
    for k, seed in ((1, 0), (2, 1)):
        assert f"capacity:   N_f = 4: run {k} of 2 (seed {seed}): " in text
    for i, lr in ((1, 0.003), (2, 0.01)):  # each candidate's start
        assert re.search(rf"lr {lr:g} \(candidate {i} of 2\), step 0 of 20;", text), text
    assert re.search(r"lr 0\.0\d+ \(candidate \d of 2\), step [1-9]\d* of 20, val 0\.\d{3}; "
                     r"at least \d+ s left in this batch", text), text
    assert "(the chosen one, extended), step 20 of 40" in text  # not converged at 20
    assert re.search(r"; about \d+ s left in this batch$", text, re.M), text  # the last
    assert all(line.startswith("capacity:   N_f = 4: run ") for line in lines)


def test_in_process_lines_and_the_same_records(every_step, tmp_path):
    lines = []
    with_lines = train(tmp_path / "a", 1, lines.append)
    check_lines(lines)
    assert kept(with_lines) == kept(train(tmp_path / "b", 1))
    assert not list(every_step.iterdir())


@pytest.mark.slow
def test_worker_processes_lines_and_the_same_records(every_step, tmp_path):
    lines = []
    with_lines = train(tmp_path / "a", 2, lines.append)
    check_lines(lines)
    assert kept(with_lines) == kept(train(tmp_path / "b", 1))
    assert not list(every_step.iterdir())  # the status files' directory is gone


def test_no_say_no_lines_and_the_runner_untouched():
    executor = InProcess()
    watch = progress.Watch(executor, None)
    assert executor.runner is None and watch.dir is None
    with watch.batch(cells()) as batch:
        batch.finished(0)
    processes = Processes(2)
    watch = progress.Watch(processes, lambda line: None)
    try:
        assert processes.runner is not None and watch.dir is not None
    finally:
        watch.close()
        processes.close()
    assert watch.dir is None


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_report_writes_every_few_seconds_and_at_each_candidate():
    clock, sent = Clock(), []
    report = progress.RunReport("h", sent.append, every_s=5.0, clock=clock)
    report.candidate(0, 3, 0.003, 2000, 8000)
    for step in range(1, 1001):  # 10 ms a step
        clock.now = step / 100
        report.after_step(step, 2000, 0.5 if step >= 50 else None)
    assert [s["step"] for s in sent] == [0, 500, 1000]  # the start, then every 5 s
    assert sent[1]["rate"] == pytest.approx(100.0) and sent[1]["val"] == 0.5
    # the rest of this candidate's cap and two candidates more; an extension may follow
    assert sent[2]["left"] == 1000 + 2 * 2000 and sent[2]["more"]
    report.candidate(1, 3, 0.01, 2000, 8000)
    assert sent[-1]["done"] == 1000 and sent[-1]["left"] == 4000 and sent[-1]["i"] == 1
    report.extending(0.01, 2000, 4000)
    assert sent[-1]["phase"] == "extending" and sent[-1]["left"] == 2000 and sent[-1]["more"]
    assert sent[-1]["done"] == 1000  # the chosen one's first 2,000 steps counted once


def test_report_failing_sink_does_not_stop_the_run():
    def sink(status):
        raise OSError("no space")

    progress.RunReport("h", sink).candidate(0, 1, 0.01, 10)


def test_batch_lines_and_eta():
    clock, lines = Clock(), []
    base = {**BASE, "task": {"name": "mqar", "vocab_size": 128},
            "train": {**BASE["train"], "lr": [0.003, 0.01, 0.03], "max_steps": 2000,
                      "max_steps_limit": 8000}}
    cfgs = [capacity.cell_config(base, 49, s) for s in (0, 1)]
    batch = progress.Batch(cfgs, lines.append, parallel=1, every_s=30.0, clock=clock)
    key = batch.runs[0].key
    status = {"key": key, "phase": "candidate", "i": 1, "n": 3, "lr": 0.01, "lrs": None,
              "step": 1250, "cap": 2000, "val": 0.4123, "done": 3250, "left": 750 + 2000,
              "more": True, "elapsed": 325.0, "rate": 10.0}
    batch.update(status)  # a candidate's start: said at once
    # run 1: 2,750 steps at 10/s; run 2 (not started): 3 x 2,000 at the mean rate, after it
    assert lines == ["capacity:   N_f = 49: run 1 of 2 (seed 0): lr 0.01 (candidate 2 of 3), "
                     "step 1,250 of 2,000, val 0.412; at least 14.6 min left in this batch"]
    clock.now = 29.0
    batch.update({**status, "step": 1300})
    batch.tick()
    assert len(lines) == 1  # nothing new before 30 s
    clock.now = 30.0
    batch.tick()
    assert len(lines) == 2 and "step 1,300 of 2,000" in lines[-1]
    batch.finished(0)
    batch.update({**status, "step": 1400})  # a finished run's late status: ignored
    assert len(lines) == 2
    two = progress.Batch(cfgs, lines.append, parallel=2, every_s=30.0, clock=clock)
    two.update(status)
    assert lines[-1].endswith("at least 10.0 min left in this batch")  # run 2 on a free slot
    assert progress.Batch(cfgs, None).eta() == (None, True)  # no rate yet


def test_batched_search_reports_its_candidates():
    class Report:
        calls = []

        def __getattr__(self, name):
            return lambda *args: self.calls.append((name, args))

    cfg = resolve(cells()[0])
    cfg.train.max_steps_limit = None
    report = Report()
    record = lr_search.run_search(cfg, torch.device("cpu"), False, batched=True, report=report)
    assert record["ensemble"] == 2
    assert report.calls == [("batched", ([0.003, 0.01], 20))]
