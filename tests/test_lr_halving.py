"""train.lr_rung: the lr candidates are compared at a rung by validation, only the best
trains on, and it is the run of its lr alone; extension judged before the anneal."""
import pytest
import torch

from recallbench.api.config import resolve
from recallbench.harness import lr_halving, lr_search, single
from recallbench.harness.convergence import History
from recallbench.harness.module import DivergedError, RecallModule
from recallbench.harness.single import go_on, train_one
from recallbench.harness.train import run

TASK = {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4}
MODEL = {"adapter": "linear-mamba", "d_model": 8, "d_state": 4}
TRAIN = {"batch_size": 32, "val_every": 5, "val_size": 64, "test_size": 32,
         "early_stop": None, "progress": False, "threads": 1}
CPU = torch.device("cpu")
TIMING = {"train_s", "wall_s", "cpu_s", "threads", "node", "provenance", "versions"}


def config(**train):
    return {"task": TASK, "model": MODEL, "train": {**TRAIN, **train}}


def trained(rec: dict, also=()) -> dict:
    return {k: v for k, v in rec.items() if k not in TIMING and k not in also}


@pytest.fixture
def steps_of(monkeypatch):
    """Optimizer steps trained per lr in the test."""
    count: dict[float, int] = {}
    step = RecallModule.training_step

    def counting(self, batch, batch_idx):
        lr = float(self.train_cfg.lr)
        count[lr] = count.get(lr, 0) + 1
        return step(self, batch, batch_idx)

    monkeypatch.setattr(RecallModule, "training_step", counting)
    return count


def test_a_paused_run_goes_on_as_the_run_never_paused():
    """Paused at step 15 and continued: the same validations, weights, AdamW state and
    learning rate as the run trained in one go (bit for bit: the same operations)."""
    cfg = resolve(config(lr=3e-2, max_steps=40, patience=3))
    paused = train_one(cfg, CPU, False, pause_at=15)
    assert paused.paused and paused.steps == 15 and paused.checkpoint.steps == 15
    went_on = go_on(paused, CPU)
    whole = train_one(cfg, CPU, False)
    assert went_on.steps == whole.steps > 15 and not went_on.paused
    assert went_on.module.history.points == whole.module.history.points
    assert trained(went_on.record(CPU)) == trained(whole.record(CPU))
    for name, value in whole.model.state_dict().items():
        assert torch.equal(went_on.model.state_dict()[name], value), name
    a, b = (t.module.trainer.optimizers[0] for t in (went_on, whole))
    for pa, pb in zip(a.param_groups[0]["params"], b.param_groups[0]["params"]):
        assert torch.equal(a.state[pa]["exp_avg"], b.state[pb]["exp_avg"])
        assert torch.equal(a.state[pa]["exp_avg_sq"], b.state[pb]["exp_avg_sq"])
    assert a.param_groups[0]["lr"] == b.param_groups[0]["lr"]
    with pytest.raises(ValueError, match="only a run stopped at its pause goes on"):
        go_on(went_on, CPU)


def test_the_winner_is_its_lr_alone_and_the_guesser_stops_at_the_rung(steps_of):
    """lr 1e-7 stays at the guess level; lr 3e-2 leaves it by the rung (70 of 80 steps):
    the guesser is dropped there, the winner trains on and extends, and its record is the
    record of its lr trained alone with the same protocol."""
    protocol = dict(patience=3, max_steps=80, max_steps_limit=320, lr_rung=0.9)
    rec = run(config(lr=[1e-7, 3e-2], **protocol))
    low, high = rec["lr_search"]
    assert rec["lr"] == 3e-2 and low["steps"] == 70 and low["rungs"] == [[70, low["val_accuracy"]]]
    assert high["rungs"] == [[70, high["rungs"][0][1]]] and high["rungs"][0][1] > low["val_accuracy"]
    assert high["steps"] == rec["steps"] > 70 and high["val_accuracy"] == rec["val_accuracy"]
    assert steps_of == {1e-7: 70, 3e-2: rec["steps"]}
    alone = run(config(lr=3e-2, **protocol))
    differ = {"config", "config_hash", "lr_search"}
    assert trained(rec, differ) == trained(alone, differ)


def test_the_rung_compares_validation_and_tests_only_the_winner(monkeypatch):
    """The choice follows the rung's validation accuracies (never the test set, which is
    scored once, for the winner); with nobody at the guess level the rung is where the
    losers stop."""
    calls = []
    real = single.score
    monkeypatch.setattr(single, "score",
                        lambda m, data, *a, **k: calls.append(len(data[0])) or real(m, data, *a, **k))
    cfg = resolve(config(lr=[3e-3, 1e-2, 3e-2], max_steps=60, lr_rung=0.5))
    rec = lr_search.run_search(cfg, CPU, show=False)
    at_rung = {e["lr"]: e["rungs"][-1] for e in rec["lr_search"]}
    assert all(s == 30 for s, _ in at_rung.values())
    best = max(at_rung, key=lambda lr: (at_rung[lr][1], -lr))
    assert rec["lr"] == best and calls == [TRAIN["test_size"]]
    losers = [e for e in rec["lr_search"] if e["lr"] != best]
    assert all(e["steps"] == 30 for e in losers) and rec["steps"] == 60
    assert rec["config_hash"] == cfg.hash() and rec["config"]["train"]["lr_rung"] == 0.5


def test_diverged_candidates_are_kept_out_and_a_winner_that_diverges_gives_way(monkeypatch):
    cfg = resolve(config(lr=[0.01, 1e6], max_steps=40, lr_rung=0.25))
    rec = lr_search.run_search(cfg, CPU, show=False)
    bad = rec["lr_search"][1]
    assert rec["lr"] == 0.01 and bad["val_accuracy"] is None and "training loss became" in bad["error"]
    with pytest.raises(DivergedError, match="every learning rate of 2 diverged"):
        lr_search.run_search(resolve(config(lr=[1e5, 1e6], max_steps=40, lr_rung=0.25)), CPU,
                             show=False)
    # the rung's winner diverges past the rung: the next best goes on in its place
    first = lr_search.run_search(resolve(config(lr=[3e-3, 3e-2], max_steps=40, lr_rung=0.25)),
                                 CPU, show=False)
    winner = first["lr"]
    step = RecallModule.training_step

    def diverging(self, batch, batch_idx):
        if float(self.train_cfg.lr) == winner and self.steps_done >= 20:
            raise DivergedError(f"training loss became nan at step {self.steps_done}")
        return step(self, batch, batch_idx)

    monkeypatch.setattr(RecallModule, "training_step", diverging)
    rec = lr_search.run_search(resolve(config(lr=[3e-3, 3e-2], max_steps=40, lr_rung=0.25)),
                               CPU, show=False)
    gone = next(e for e in rec["lr_search"] if e["lr"] == winner)
    assert rec["lr"] != winner and rec["steps"] == 40 and "at step 20" in gone["error"]


def test_the_rung_lies_on_the_validation_grid():
    tc = resolve(config(max_steps=2000, val_every=50, lr_rung=0.33)).train
    assert lr_halving.rung_steps(tc) == 650
    assert lr_halving.rung_steps(resolve(config(max_steps=40, lr_rung=0.01)).train) == 5
    assert lr_halving.rung_steps(resolve(config(max_steps=5, lr_rung=0.9)).train) is None
    paper = resolve(config(max_steps=2000, val_every=50, lr_rung=0.25, recipe="paper")).train
    step = lr_halving.rung_steps(paper)
    assert (step - 1) % paper.val_every == 0 and step == 501


def test_a_null_rung_leaves_the_config_and_its_hash_as_they_were():
    plain, null = resolve(config(lr=[1e-3, 1e-2])), resolve(config(lr=[1e-3, 1e-2], lr_rung=None))
    assert "lr_rung" not in null.to_dict()["train"] and null.hash() == plain.hash()
    assert resolve(config(lr=[1e-3, 1e-2], lr_rung=0.25)).hash() != plain.hash()
    from recallbench.runs.capacity import TRAIN as CARD

    card = resolve({"task": {"name": "mqar", "vocab_size": 512, "num_facts": 8, "seq_len": 32},
                    "model": {"d_model": 32, "d_state": 8}, "train": dict(CARD)})
    assert "lr_rung" not in card.to_dict()["train"]


@pytest.mark.parametrize("value", ["0", "1", "-0.5", "1.5", "x", "[0.5]"])
def test_bad_lr_rung_is_one_line_naming_the_field_and_range(cli, value):
    rc, out, err = cli("run", "--set", f"train.lr_rung={value}")
    assert rc == 2 and out == "" and err.count("\n") == 1 and "train.lr_rung" in err, err
    assert "(0, 1)" in err or "expected float" in err, err


def test_improving_before_the_anneal():
    """The flat phase's last window against what the anneal added after it."""
    def history(points, guess=None, patience=2):
        h = History(None, patience, guess)
        for s, a in points:
            h.add(s, a, total=10_000)
        return h

    rising = [(10, 0.2), (20, 0.4), (30, 0.6), (40, 0.8), (50, 0.82), (60, 0.83)]
    assert history(rising).improving_before(40)  # +0.4 before the anneal, +0.03 after
    lifted = [(10, 0.5), (20, 0.5), (30, 0.505), (40, 0.51), (50, 0.6), (60, 0.7)]
    assert not history(lifted).improving_before(40)  # +0.01 before, +0.19 by the anneal
    assert history(lifted[:2]).improving_before(20)  # too few validations to judge
    late = [(10, 0.25), (20, 0.25), (30, 0.25), (40, 0.25), (50, 0.6), (60, 0.8)]
    assert history(late, guess=0.25).improving_before(40)  # left the guess in the anneal


def test_a_cap_judged_before_the_anneal_is_not_extended(monkeypatch):
    """At its cap (80 steps, still improving) the run extends; under lr_rung it extends only
    if its steps before the anneal were still improving (the History's judgment), and is
    otherwise recorded converged, with the plain run's steps."""
    base = dict(lr=3e-2, patience=3, max_steps=80, max_steps_limit=320)
    plain = train_one(resolve(config(**base)), CPU, False)
    assert plain.module.extended >= 1
    seen = []

    def judged(value):
        def improving_before(self, start):
            seen.append(start)
            return value
        monkeypatch.setattr(History, "improving_before", improving_before)
        return train_one(resolve(config(**base, lr_rung=0.5)), CPU, False)

    stopped = judged(False)
    assert seen and seen[0] == 40  # the anneal of an 80-step cap starts at step 40
    assert stopped.steps == 80 and stopped.module.extended == 0
    assert stopped.convergence()["converged"] and stopped.convergence()["stop_reason"] == "max_steps"
    went_on = judged(True)
    assert went_on.steps == plain.steps and went_on.module.extended == plain.module.extended
    assert went_on.module.history.points == plain.module.history.points
