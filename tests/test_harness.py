"""The training harness: data module, metric, schedule, determinism, and the paper's Table-8 runs."""
from __future__ import annotations

import json

import pytest
import torch

from recallbench.api.config import config_hash, resolve
from recallbench.harness.data import RecallDataModule, TrainStream, fixed_set, VAL_STREAM
from recallbench.harness.metrics import RecallAccuracy
from recallbench.harness.schedule import warmup_flat_cosine
from recallbench.api.task import IGNORE
from recallbench.harness.train import run

FAST = {"progress": False, "val_size": 256, "test_size": 512}


def test_metric_counts_top1_and_topk():
    logits = torch.zeros(1, 4, 6)
    targets = torch.full((1, 4), IGNORE)
    targets[0, 1], targets[0, 3] = 5, 2
    logits[0, 1, 5] = 3.0  # right
    logits[0, 3, 4], logits[0, 3, 2] = 2.0, 1.0  # second best
    logits[0, 0, 0] = 9.0  # unlabelled positions do not count
    m = RecallAccuracy(top_k=2)
    m.update(logits, targets)
    out = m.compute()
    assert (out["correct"], out["correct_topk"], out["total"]) == (1, 2, 2)
    assert out["accuracy"] == pytest.approx(0.5) and out["accuracy_topk"] == pytest.approx(1.0)


def test_schedule_warmup_flat_cosine():
    f = [warmup_flat_cosine(s, 100, 0.1, 0.5) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(v == 1.0 for v in f[10:50])
    assert all(a >= b for a, b in zip(f[50:], f[51:])) and f[-1] < 0.01


def test_streams_differ_per_worker_and_rank_eval_sets_fixed():
    task = resolve({}).task
    a = next(iter(TrainStream(task, 8, seed=0, rank=0)))[0]
    b = next(iter(TrainStream(task, 8, seed=0, rank=1)))[0]
    c = next(iter(TrainStream(task, 8, seed=1, rank=0)))[0]
    a2 = next(iter(TrainStream(task, 8, seed=0, rank=0)))[0]
    assert torch.equal(a, a2) and not torch.equal(a, b) and not torch.equal(a, c)
    # data-loader workers get different streams
    loader = torch.utils.data.DataLoader(TrainStream(task, 8, seed=0), batch_size=None,
                                         num_workers=2)
    it = iter(loader)
    first, second = next(it)[0], next(it)[0]  # round-robin: worker 0, then worker 1
    assert not torch.equal(first, second)
    # evaluation sets do not depend on the run seed
    dm0 = RecallDataModule(task, 8, seed=0, val_size=16, test_size=32)
    dm1 = RecallDataModule(task, 8, seed=5, val_size=16, test_size=32)
    dm0.setup(), dm1.setup()
    assert torch.equal(dm0.test_set[0], dm1.test_set[0])
    assert not torch.equal(dm0.val_set[0][:16], dm0.test_set[0][:16])
    assert torch.equal(fixed_set(task, 16, VAL_STREAM)[0], dm0.val_set[0])


def test_table8_linear_mamba_reaches_099():
    """The paper's Table-8 setting: MQAR V=128, L=64, N_f=16, D=64, N=16."""
    r = run({"train": {**FAST, "test_size": 2048}})
    assert r["status"] == "ok"
    assert r["accuracy"] >= 0.99, r
    assert r["wall_s"] > 0 and r["train_s"] <= r["wall_s"]
    assert r["state_size"] == 2 * 64 * 16
    assert r["total"] == 2048 * 16 and r["correct"] == round(r["accuracy"] * r["total"])


@pytest.mark.slow
def test_table8_without_conv_is_a_bag_of_values():
    """Conv1D width 1 cannot bind keys to values: about 1/N_f (paper: 0.06)."""
    r = run({"model": {"d_conv": 1}, "train": {**FAST, "max_steps": 300}})
    assert 0.03 <= r["accuracy"] <= 0.12, r["accuracy"]


def test_same_seed_same_numbers_other_seed_other_data():
    cfg = {"task": {"name": "mqar", "vocab_size": 64, "seq_len": 32, "num_facts": 8},
           "model": {"d_model": 16, "d_state": 4}, "train": {**FAST, "max_steps": 30}}
    a, b = run(cfg), run(cfg)
    c = run({**cfg, "train": {**cfg["train"], "seed": 1}})
    assert a["accuracy"] == b["accuracy"] and a["correct"] == b["correct"]
    assert a["config_hash"] == b["config_hash"] != c["config_hash"]
    assert (a["correct"], a["val_accuracy"]) != (c["correct"], c["val_accuracy"])


def test_designed_exact_circuit_scores_one():
    """Thm 3.1: D = N = V with identity embedding recalls perfectly."""
    r = run({"task": {"name": "mqar", "vocab_size": 128, "seq_len": 64, "num_facts": 16},
             "model": {"adapter": "designed", "d_model": 128, "d_state": 128},
             "train": FAST})
    assert r["accuracy"] == 1.0 and r["steps"] == 0


def test_attention_state_grows_with_length():
    r = run({"model": {"adapter": "attention", "d_model": 32, "n_heads": 2},
             "train": {**FAST, "max_steps": 5}})
    assert r["state_size"] is None and "grows with L" in r["state_note"]


def test_config_hash_ignores_execution_only_keys():
    a = resolve({"train": {"threads": 1, "progress": False}}).to_dict()
    b = resolve({"train": {"threads": 2}}).to_dict()
    c = resolve({"train": {"lr": 0.02}}).to_dict()
    assert config_hash(a) == config_hash(b) != config_hash(c)


def test_cli_run_writes_result_and_accepts_several_sets(cli, tmp_path):
    rc, out, err = cli("run", "--quiet",
                       "--set", "task.vocab_size=64 task.seq_len=32 task.num_facts=8",
                       "--set", "model.d_model=16", "--set", "train.max_steps=20",
                       "--set", "train.val_size=32 train.test_size=64", "--out", "res.json")
    assert rc == 0, err
    rec = json.loads((tmp_path / "res.json").read_text())
    for key in ("accuracy", "accuracy_topk", "correct", "total", "state_size", "params", "steps",
                "wall_s", "seed", "config", "config_hash", "versions", "device"):
        assert key in rec
    assert rec["config"]["task"]["vocab_size"] == 64 and rec["config"]["model"]["d_model"] == 16
    assert rec["total"] == 64 * 8
    assert "accuracy" in out and "res.json" in out


@pytest.mark.parametrize("args,message", [
    (["--set", "model.d_stat=3"], "unknown key model.d_stat (did you mean d_state?)"),
    (["--set", "optim.lr=1"], "unknown section 'optim'"),
    (["--set", "model.adapter=mambaa"], "unknown adapter 'mambaa'; did you mean mamba"),
    (["--set", "train.lr=-1"], "train.lr = -1 is not allowed: a number > 0, a list of 1 to 16 numbers > 0, or auto"),
    (["--set", "train.batch_size=abc"], "train.batch_size = 'abc' is not allowed: expected an integer"),
    (["--set", "model.head_pattern=mqa model.adapter=attention model.n_heads=2"],
     "model.head_pattern = 'mqa' is not allowed for adapter attention: one of mha"),
    (["missing.yaml"], "cannot read config missing.yaml"),
])
def test_cli_bad_config_is_one_line(cli, args, message):
    rc, out, err = cli("run", *args)
    assert rc == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_console_script_exit_code(cli_subprocess):
    rc, out, err = cli_subprocess("run", "--set", "task.vocab_size=7")
    assert rc == 2 and err.strip() == (
        "recallbench: error: task.vocab_size = 7 is not allowed: must be even "
        "(keys and values take one half each)")


def test_progress_bar_counts_steps_not_epochs(capsys):
    """A run is one stream bounded by max_steps: the bar says "train", never "Epoch 0/-2"."""
    rec = run({"train": {"max_steps": 3, "val_every": 3, "val_size": 32, "test_size": 32}},
              progress=True)
    assert rec["steps"] == 3
    out = capsys.readouterr()
    shown = out.out + out.err
    assert "train" in shown and "3/3" in shown  # the bar's total is max_steps
    assert "Epoch" not in shown and "/-" not in shown


def test_the_module_validates_every_val_every_steps_and_the_final_weights():
    """The run validates itself (no Lightning evaluation loop): after every val_every-th
    step and at the last, over every validation sequence (600: two batches), leaving the
    model in train mode; its best accuracy is the best weights' accuracy on that set."""
    from recallbench.harness.single import score, train_one

    cfg = resolve({"task": {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4},
                   "model": {"adapter": "linear-mamba", "d_model": 8, "d_state": 4},
                   "train": {"batch_size": 16, "max_steps": 23, "val_every": 5, "val_size": 600,
                             "test_size": 32, "early_stop": None, "progress": False,
                             "threads": 1}})
    t = train_one(cfg, torch.device("cpu"), False)
    assert [s for s, _ in t.module.history.points] == [5, 10, 15, 20, 23]
    assert t.module.last_val_step == t.steps == 23
    assert all(m.training for m in t.model.modules())
    val = score(t.model, t.module.val_set, cfg.train.top_k, torch.device("cpu"))
    assert val["total"] == 600 * 4
    assert val["accuracy"] == t.module.best_val == max(a for _, a in t.module.history.points)
    assert t.module.best_step in [s for s, _ in t.module.history.points]


def test_without_a_progress_bar_nothing_is_logged_and_the_run_is_the_same(capsys, monkeypatch):
    """The logged loss and validation accuracy feed only the progress bar: a run without one
    does not log them (Lightning's per-step bookkeeping) and trains the same floats."""
    from recallbench.harness import module

    calls = []
    logged = module.RecallModule.log
    monkeypatch.setattr(module.RecallModule, "log",
                        lambda self, name, *a, **k: (calls.append(name), logged(self, name, *a, **k)))
    cfg = {"train": {"max_steps": 12, "val_every": 4, "val_size": 64, "test_size": 64,
                     "early_stop": None, "threads": 1}}
    shown = run(cfg, progress=True)
    assert calls.count("loss") == 12 and calls.count("val_accuracy") == 3, calls
    capsys.readouterr()
    calls.clear()
    quiet = run(cfg, progress=False)
    assert calls == []
    for key in ("accuracy", "val_accuracy", "best_step", "steps", "correct", "lr"):
        assert quiet[key] == shown[key], key


def test_a_batch_already_on_its_device_is_not_moved():
    from recallbench.harness.module import RecallModule

    batch = (torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))
    module = RecallModule.__new__(RecallModule)  # the hook reads nothing of the module
    assert module.transfer_batch_to_device(batch, torch.device("cpu"), 0) is batch
    moved = module.transfer_batch_to_device(batch, torch.device("meta"), 0)
    assert moved is not batch and all(t.device.type == "meta" for t in moved)
