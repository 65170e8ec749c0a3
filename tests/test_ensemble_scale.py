"""Batched ensembles at the sizes a GPU wants: K = 64 members equal the same members
trained one by one; members that do not fit together train in chunks; the opt-in
compiled step gives the plain step's numbers, and falls back in one warning line."""
from __future__ import annotations

import pytest
import torch

from recallbench.api.config import resolve
from recallbench.api.errors import ConfigError
from recallbench.harness.ensemble import chunks, run_ensemble
from recallbench.harness.ensemble import compile as ensemble_compile
from recallbench.harness.ensemble.compile import CompileFallbackWarning
from recallbench.harness.ensemble.memory import ensemble_bytes, members_that_fit
from recallbench.harness.module import RecallModule
from recallbench.harness.train import run

TASK = {"name": "mqar", "vocab_size": 16, "seq_len": 8, "num_facts": 2}
MODEL = {"adapter": "linear-mamba", "d_model": 4, "d_state": 2}
TRAIN = {"max_steps": 4, "batch_size": 4, "val_every": 2, "val_size": 16, "test_size": 16,
         "progress": False, "early_stop": None, "lr": 1e-2, "device": "cpu"}


def cfg(seed=0, **train):
    return {"task": dict(TASK), "model": dict(MODEL), "train": {**TRAIN, "seed": seed, **train}}


def curves_of(configs, **kw):
    curves = [[] for _ in configs]

    def on_step(step, members, losses):
        for k, v in zip(members, losses):
            curves[k].append(v)

    return run_ensemble(configs, on_step=on_step, **kw), curves


def assert_same(records, curves, ref_records, ref_curves, rel=1e-4):
    for rec, curve, ref, ref_curve in zip(records, curves, ref_records, ref_curves):
        assert len(curve) == len(ref_curve) == rec["steps"] == ref["steps"]
        gap = max(abs(a - b) / abs(b) for a, b in zip(curve, ref_curve))
        assert gap < rel, gap
        assert rec["accuracy"] == pytest.approx(ref["accuracy"], abs=1e-6)
        assert rec["val_accuracy"] == pytest.approx(ref["val_accuracy"], abs=1e-6)
        assert rec["config_hash"] == ref["config_hash"]


@pytest.mark.slow
def test_64_members_equal_one_by_one(monkeypatch):
    # members differ in seed and lr; a few stop early (early_stop 0: the first validation)
    configs = [cfg(k, lr=[1e-2, 3e-3][k % 2], early_stop=0.0 if k % 9 == 0 else None)
               for k in range(64)]
    records, curves = curves_of(configs)
    assert [r["ensemble"] for r in records] == [64] * 64
    assert {r["steps"] for r in records} == {2, 4}  # some stopped at the first validation
    alone = [curves_of([c]) for c in configs]
    assert_same(records, curves, [a[0][0] for a in alone], [a[1][0] for a in alone])
    # and the one-by-one ensemble of one is the single run (the Lightning harness)
    losses = []
    orig = RecallModule.training_step
    monkeypatch.setattr(RecallModule, "training_step",
                        lambda self, b, i: losses.append(orig(self, b, i)) or losses[-1])
    for k in (1, 63):
        losses.clear()
        ref = run(configs[k])
        assert ref["steps"] == records[k]["steps"]
        assert max(abs(a - b.item()) / b.item() for a, b in zip(curves[k], losses)) < 1e-4


def test_members_that_fit_bisects_the_estimate():
    c = resolve(cfg())
    one, eight = ensemble_bytes(c, 1), ensemble_bytes(c, 8)
    assert one < eight < 8 * one  # the sets and the evaluation batch are shared
    assert members_that_fit(c, 64, ensemble_bytes(c, 5)) == 5
    assert members_that_fit(c, 64, ensemble_bytes(c, 5) - 1) == 4
    assert members_that_fit(c, 4, 1 << 50) == 4
    assert members_that_fit(c, 64, 0) == 1  # one member: check_memory's to refuse


def test_ensemble_too_big_trains_in_chunks_with_the_same_numbers(monkeypatch):
    from recallbench.harness.ensemble import run as ensemble_run

    configs = [cfg(k) for k in range(7)]
    whole, whole_curves = curves_of(configs)
    room = ensemble_bytes(resolve(configs[0]), 3)
    monkeypatch.setattr(ensemble_run, "available", lambda device: room)
    parts, part_curves = curves_of(configs)
    assert [r["ensemble"] for r in parts] == [3, 3, 3, 3, 3, 3, 1]
    assert_same(parts, part_curves, whole, whole_curves)
    # a learning-rate search is never split: two searches of two members in room for three
    searches = [resolve(cfg(k, lr=[1e-2, 3e-3])) for k in range(2)]
    assert [len(g) for g in chunks(searches, torch.device("cpu"), free=room)] == [1, 1]


def test_member_that_does_not_fit_alone_is_refused_in_one_line(monkeypatch):
    from recallbench.harness import resources

    monkeypatch.setattr(resources, "host_available", lambda: 1000)
    with pytest.raises(ConfigError) as exc:
        run_ensemble([cfg(0), cfg(1)])
    text = str(exc.value)
    assert "\n" not in text and "a run would need" in text and "this machine has 1e+03 B" in text


def test_compile_that_fails_warns_once_and_trains_plain(monkeypatch):
    configs = [cfg(k) for k in range(3)]
    plain, plain_curves = curves_of(configs)

    def broken(fn, **kw):
        raise RuntimeError("no compiler here\nsecond line")

    monkeypatch.setattr(ensemble_compile.torch, "compile", broken)
    with pytest.warns(CompileFallbackWarning) as seen:
        got, got_curves = curves_of(configs, compile="default")
    assert len(seen) == 1
    message = str(seen[0].message)
    assert "torch.compile failed (RuntimeError: no compiler here" in message
    assert "\n" not in message and message.endswith("training uncompiled")
    assert_same(got, got_curves, plain, plain_curves, rel=1e-6)


def test_compiled_step_that_differs_or_fails_on_first_call_is_dropped(monkeypatch):
    configs = [cfg(k, early_stop=0.0) for k in range(3)]
    plain, plain_curves = curves_of(configs)
    for wrong, said in ((lambda *a: torch.zeros(1), "differs from the plain one"),
                        (lambda *a: 1 / 0, "the compiled step failed (ZeroDivisionError")):
        monkeypatch.setattr(ensemble_compile.torch, "compile", lambda fn, **kw: wrong)
        with pytest.warns(CompileFallbackWarning, match=said.replace("(", r"\(")):
            got, got_curves = curves_of(configs, compile="max-autotune")
        assert_same(got, got_curves, plain, plain_curves, rel=1e-6)


def test_unknown_compile_mode_is_one_line():
    with pytest.raises(ConfigError, match=r"^--compile 'fast' is not allowed: one of default, "
                                          r"reduce-overhead, max-autotune, aot_eager$"):
        run_ensemble([cfg(0)], compile="fast")


@pytest.mark.slow
def test_compiled_step_gives_the_plain_numbers():
    # aot_eager traces and runs the compiled graph without generating C++ (inductor takes
    # minutes per shape on a small CPU); members stop at different steps, so the whole-batch
    # path (stopped members' rows computed and discarded) is exercised
    configs = [cfg(k, early_stop=0.0 if k % 3 == 0 else None, max_steps=6) for k in range(6)]
    plain, plain_curves = curves_of(configs)
    got, got_curves = curves_of(configs, compile="aot_eager")
    assert {r["steps"] for r in got} == {2, 6} or len({r["steps"] for r in got}) > 1
    assert_same(got, got_curves, plain, plain_curves, rel=1e-5)
