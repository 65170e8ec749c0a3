"""Learning-rate search: train.lr as a list or auto, selection by validation, never by test."""
import math

import pytest
import torch

from recallbench.api.config import AUTO_LRS, resolve
from recallbench.harness import lr_candidates, lr_search, single, train
from recallbench.harness.ensemble import model as ensemble_model
from recallbench.harness.module import DivergedError
from recallbench.runs.sweep import Sweep

TASK = {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4}
MODEL = {"adapter": "linear-mamba", "d_model": 8, "d_state": 4}
TRAIN = {"max_steps": 60, "batch_size": 32, "val_every": 10, "val_size": 64, "test_size": 64,
         "early_stop": None, "progress": False, "threads": 1}


def config(**train):
    return {"task": TASK, "model": MODEL, "train": {**TRAIN, **train}}


def test_auto_is_a_log_grid_and_lists_are_canonical():
    lrs = resolve(config(lr="auto")).train.lr
    assert lrs == list(AUTO_LRS) and len(lrs) >= 6
    assert lrs[0] >= 1e-4 and lrs[-1] <= 3e-2 and lrs == sorted(lrs)
    steps = [math.log10(b / a) for a, b in zip(lrs, lrs[1:])]
    assert max(steps) - min(steps) < 0.1 and min(steps) > 0.4  # evenly spaced in log
    # the list is part of the config: another search is another point; order does not count
    h = {str(lr): resolve(config(lr=lr)).hash() for lr in
         ([3e-4, 1e-2], [1e-2, 3e-4], [3e-4, 3e-3], 1e-2, [1e-2])}
    assert h["[0.0003, 0.01]"] == h["[0.01, 0.0003]"] != h["[0.0003, 0.003]"]
    assert h["0.01"] == h["[0.01]"] != h["[0.0003, 0.01]"]
    assert resolve(config(lr=[0.01, 0.0003, 0.01])).train.lr == [0.0003, 0.01]


@pytest.mark.parametrize("value", ["[]", "fast", "[0.1,-1]", "0", "-1", "[a]",
                                   "[" + ",".join(["0.001"] * 8 + ["0.01"] * 9) + "]",
                                   "[" + ",".join(f"{i}e-4" for i in range(1, 18)) + "]"])
def test_bad_lr_is_one_line_and_exit_2(cli, value):
    rc, out, err = cli("run", "--set", f"train.lr={value}")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "train.lr" in err
    assert "a number > 0, a list of 1 to 16 numbers > 0, or auto" in err


def test_search_keeps_the_best_by_validation_and_tests_only_it(monkeypatch, capsys):
    calls = []
    real = single.score

    def counting(model, data, *args, **kw):
        calls.append(len(data[0]))
        return real(model, data, *args, **kw)

    monkeypatch.setattr(single, "score", counting)
    cfg = resolve(config(lr=[0.0003, 0.01], max_steps=30))
    rec = lr_search.run_search(cfg, torch.device("cpu"), show=True, batched=False)
    entries = rec["lr_search"]
    assert [e["lr"] for e in entries] == [0.0003, 0.01]
    assert all(set(e) == set(lr_candidates.ENTRY_KEYS) for e in entries)
    best = max(entries, key=lambda e: e["val_accuracy"])
    assert rec["lr"] == best["lr"] and rec["val_accuracy"] == best["val_accuracy"]
    assert entries[0]["val_accuracy"] != entries[1]["val_accuracy"]
    assert calls == [TRAIN["test_size"]]  # the test set, once, for the chosen model only
    assert rec["config"]["train"]["lr"] == [0.0003, 0.01] and rec["config_hash"] == cfg.hash()
    err = capsys.readouterr().err
    assert err.count("lr search [") == 2 and "lr=0.0003" in err and "lr=0.01" in err


@pytest.mark.slow
def test_batched_and_sequential_searches_choose_the_same_lr(monkeypatch):
    """The two paths train the same models up to floating-point order, so their validation
    accuracies agree closely; with candidates far apart they choose the same lr."""
    scored = []
    real = ensemble_model.StackedModels.score

    def spy(self, data, idx, top_k, **kw):
        if data is self.test_set:
            scored.append(None if idx is None else idx.tolist())
        return real(self, data, idx, top_k, **kw)

    monkeypatch.setattr(ensemble_model.StackedModels, "score", spy)
    cfg = resolve(config(lr=[1e-4, 1e-2]))
    batched = train.run(cfg)  # linear-mamba vmaps: the candidates are one ensemble
    sequential = lr_search.run_search(cfg, torch.device("cpu"), show=False, batched=False)
    assert batched["ensemble"] == 2 and "ensemble" not in sequential
    for a, b in zip(batched["lr_search"], sequential["lr_search"]):
        assert a["lr"] == b["lr"] and a["steps"] == b["steps"]
        assert a["val_accuracy"] == pytest.approx(b["val_accuracy"], abs=0.02)
    gap = abs(sequential["lr_search"][0]["val_accuracy"] - sequential["lr_search"][1]["val_accuracy"])
    assert gap > 0.05 and batched["lr"] == sequential["lr"] == 1e-2
    assert scored == [[1]]  # the test set, once, for the chosen member only


def test_choose_ties_fewer_steps_then_smaller_lr():
    e = lr_candidates.entry
    assert lr_candidates.choose([e(0.01, 0.5, 100, True), e(0.001, 0.5, 80, True)]) == 1
    assert lr_candidates.choose([e(0.01, 0.5, 80, True), e(0.001, 0.5, 80, True)]) == 1
    assert lr_candidates.choose([e(0.001, 0.5, 80, True), e(0.01, 0.5, 80, True)]) == 0
    assert lr_candidates.choose([e(0.1, None, 3, False, "diverged"), e(0.01, 0.0, 80, False)]) == 1
    assert lr_candidates.choose([e(0.1, None, 3, False, "diverged")]) is None


def test_a_diverged_candidate_is_kept_out(monkeypatch):
    cfg = resolve(config(lr=[0.01, 1e6], max_steps=40, val_every=20, val_size=8, test_size=8))
    rec = lr_search.run_search(cfg, torch.device("cpu"), show=False, batched=False)
    bad = rec["lr_search"][1]
    assert rec["lr"] == 0.01 and bad["lr"] == 1e6 and bad["val_accuracy"] is None
    assert "training loss became" in bad["error"]
    with pytest.raises(DivergedError, match="every learning rate of 2 diverged"):
        lr_search.run_search(resolve(config(lr=[1e5, 1e6], max_steps=40, val_every=20,
                                            val_size=8, test_size=8)),
                             torch.device("cpu"), show=False, batched=False)


def test_sweeps_take_list_valued_lr_in_the_base_and_as_an_axis_value():
    base = {"task": TASK, "model": MODEL, "train": {**TRAIN, "lr": [0.001, 0.01]}}
    one = Sweep.from_dict({"base": base, "axes": {"train.seed": [0, 1]}}).expand()
    assert len(one.points) == 2
    assert all(p.cfg.train.lr == [0.001, 0.01] for p in one.points)
    axis = Sweep.from_dict({"base": base, "axes": {"train.lr": [[0.003, 0.0003], 0.01, "auto"]}})
    pts = axis.expand().points
    assert [p.cfg.train.lr for p in pts] == [[0.0003, 0.003], 0.01, list(AUTO_LRS)]
    assert len({p.hash for p in pts}) == 3
