"""train.max_steps_limit: a run still improving at its cap goes on from its own state with
the cap doubled, up to the limit, and its record says so."""
import pytest
import torch

from recallbench.api.config import resolve
from recallbench.harness.ensemble import EnsembleError, run_ensemble
from recallbench.harness.module import DivergedError, RecallModule
from recallbench.harness.schedule import warmup_flat_cosine
from recallbench.harness.single import extend, train_one
from recallbench.harness.train import run

TASK = {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4}
MODEL = {"adapter": "linear-mamba", "d_model": 8, "d_state": 4}
TRAIN = {"batch_size": 32, "val_every": 5, "val_size": 32, "test_size": 32,
         "early_stop": None, "progress": False, "threads": 1}


def config(**train):
    return {"task": TASK, "model": MODEL, "train": {**TRAIN, **train}}


#: record fields that are timings or where the run ran, not what it trained
TIMING = {"train_s", "wall_s", "cpu_s", "threads", "node", "provenance", "versions"}


def trained_fields(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in TIMING}


@pytest.fixture
def trained_steps(monkeypatch):
    """How many optimizer steps the runs of the test trained, all runs together."""
    count = [0]
    step = RecallModule.training_step

    def counting(self, batch, batch_idx):
        count[0] += 1
        return step(self, batch, batch_idx)

    monkeypatch.setattr(RecallModule, "training_step", counting)
    return count


@pytest.fixture
def lrs(monkeypatch):
    """The learning rate of every optimizer step of the runs trained in the test."""
    seen: dict[int, float] = {}
    step = RecallModule.training_step

    def recording(self, batch, batch_idx):
        seen[self.global_step] = self.optimizers().param_groups[0]["lr"]
        return step(self, batch, batch_idx)

    monkeypatch.setattr(RecallModule, "training_step", recording)
    return seen


def test_a_run_cut_while_improving_continues_from_its_own_state(lrs):
    """lr 3e-2 learns slowly: at a cap of 20 steps it is still at the guess level, so the
    cap doubles until the run leaves it and stops on a plateau.  The same optimizer,
    scheduler and weights go on (AdamW's step count is the run's), its first 20 steps are
    the plain 20-step run's, and each segment follows the schedule of its own cap."""
    cfg = resolve(config(lr=3e-2, patience=2, max_steps=20, max_steps_limit=320))
    t = train_one(cfg, torch.device("cpu"), False)
    rec = t.record(torch.device("cpu"))
    assert rec["extended"] >= 1 and rec["max_steps_reached"] == 20 * 2 ** rec["extended"]
    assert 20 * 2 ** (rec["extended"] - 1) < rec["steps"] <= rec["max_steps_reached"]
    assert rec["converged"] and rec["stop_reason"] == "plateau"
    opt = t.module.trainer.optimizers[0]
    assert {int(s["step"]) for s in opt.state.values()} == {rec["steps"]}
    assert t.module.trainer.lr_scheduler_configs[0].scheduler.last_epoch == rec["steps"]
    caps = [20 * 2 ** k for k in range(rec["extended"] + 1)]
    for step, lr in lrs.items():
        cap = next(c for c in caps if step < c)
        assert lr == pytest.approx(3e-2 * warmup_flat_cosine(step, cap, 0.05, 0.5), abs=1e-12)
    assert lrs[20] == pytest.approx(3e-2)  # a warm restart at the first doubling
    steps = [s for s, _ in t.module.history.points]
    assert steps == list(range(5, rec["steps"] + 1, 5))  # one run, validated throughout
    plain = train_one(resolve(config(lr=3e-2, patience=2, max_steps=20)),
                      torch.device("cpu"), False)
    assert plain.module.history.points == t.module.history.points[:4]
    assert plain.record(torch.device("cpu"))["extended"] == 0


def test_the_limit_is_respected_and_the_last_doubling_stops_at_it():
    """lr 1e-7 never leaves the guess level, so the run is never converged: 12 → 24 → 30
    (not 48), and there it stops, not converged.  Caps off the validation grid (every 5)
    are validated too: the judgment at a cap is made on the weights at the cap."""
    cfg = resolve(config(lr=1e-7, patience=2, max_steps=12, max_steps_limit=30))
    t = train_one(cfg, torch.device("cpu"), False)
    rec = t.record(torch.device("cpu"))
    assert rec["steps"] == 30 and rec["max_steps_reached"] == 30 and rec["extended"] == 2
    assert rec["stop_reason"] == "max_steps" and rec["converged"] is False
    assert rec["config"]["train"]["max_steps_limit"] == 30
    assert [s for s, _ in t.module.history.points] == [5, 10, 12, 15, 20, 24, 25, 30]


def test_a_run_that_converges_before_its_cap_is_not_extended():
    rec = run(config(lr=3e-2, patience=2, max_steps=200, max_steps_limit=800))
    assert rec["stop_reason"] == "plateau" and rec["steps"] < 200
    assert rec["extended"] == 0 and rec["max_steps_reached"] == 200


def test_a_null_limit_stays_out_of_the_config_and_its_hash():
    plain, null = resolve(config(max_steps=40)), resolve(config(max_steps=40, max_steps_limit=None))
    assert "max_steps_limit" not in null.to_dict()["train"] and null.hash() == plain.hash()
    assert resolve(config(max_steps=40, max_steps_limit=80)).hash() != plain.hash()
    rec = run(config(lr=1e-2, max_steps=10))
    assert rec["extended"] == 0 and rec["max_steps_reached"] == 10 and rec["steps"] == 10


def test_bad_max_steps_limit_is_one_line(cli):
    for value in ("10", "-1", "1.5", "x", "10000000000"):  # 10: below max_steps (100)
        rc, out, err = cli("run", "--set", "train.max_steps=100",
                           "--set", f"train.max_steps_limit={value}")
        assert rc == 2 and err.count("\n") == 1 and "train.max_steps_limit" in err, (value, err)


def test_the_ensemble_refuses_the_limit_and_a_search_trains_one_by_one():
    with pytest.raises(EnsembleError, match=r"^train\.max_steps_limit = 40 \(config 1\)"):
        run_ensemble([config(lr=1e-2, max_steps=10), config(lr=1e-2, max_steps=10,
                                                            max_steps_limit=40)])
    rec = run(config(lr=[1e-7, 3e-2], patience=2, max_steps=10, max_steps_limit=20))
    assert rec["status"] == "ok" and "ensemble" not in rec
    assert rec["max_steps_reached"] == 20 and rec["extended"] == 1


def test_a_search_extends_only_the_candidate_it_chose(trained_steps):
    """The candidates are compared at max_steps; the chosen one, still improving there,
    goes on from its checkpoint with the limit (its first 20 steps are not trained again);
    a candidate that stays at the guess (lr 1e-7) is not extended beside it."""
    capped = run(config(lr=3e-2, patience=2, max_steps=20))
    assert not capped["converged"]  # at the cap it was still improving: hence the extension
    trained_steps[0] = 0
    rec = run(config(lr=[1e-7, 3e-2], patience=2, max_steps=20, max_steps_limit=160))
    low, high = rec["lr_search"]
    assert low["steps"] == 20 and not low["converged"]
    assert rec["lr"] == 3e-2 and rec["extended"] >= 1 and high["steps"] == rec["steps"] > 20
    assert trained_steps[0] == 20 + rec["steps"]  # not 20 + 20 + rec["steps"]
    alone = run(config(lr=3e-2, patience=2, max_steps=20, max_steps_limit=160))
    # the chosen candidate's extended run is the run of its lr alone, step for step
    differ = {"config", "config_hash", "lr_search"}
    assert {k: v for k, v in trained_fields(rec).items() if k not in differ} == \
        {k: v for k, v in trained_fields(alone).items() if k not in differ}


def test_a_run_continued_from_its_checkpoint_is_the_run_that_had_the_limit(trained_steps):
    """train_one to the cap with a checkpoint, then extend: the same validations, weights,
    AdamW moments, scheduler and record, bit for bit, as one run with the limit from the
    start; and only the steps past the cap are trained again."""
    cpu = torch.device("cpu")
    capped = train_one(resolve(config(lr=3e-2, patience=2, max_steps=20)), cpu, False,
                       checkpoint=True)
    assert capped.checkpoint is not None and capped.checkpoint.steps == 20
    trained_steps[0] = 0
    went_on = extend(capped, 160, cpu)
    assert trained_steps[0] == went_on.steps - 20
    whole = train_one(resolve(config(lr=3e-2, patience=2, max_steps=20, max_steps_limit=160)),
                      cpu, False)
    assert went_on.module.extended >= 1 and went_on.steps == whole.steps > 20
    assert went_on.module.history.points == whole.module.history.points
    assert went_on.module.best_step == whole.module.best_step
    assert trained_fields(went_on.record(cpu)) == trained_fields(whole.record(cpu))
    for name, value in whole.model.state_dict().items():  # the best-validation weights
        assert torch.equal(went_on.model.state_dict()[name], value), name
    a, b = (t.module.trainer.optimizers[0] for t in (went_on, whole))
    for pa, pb in zip(a.param_groups[0]["params"], b.param_groups[0]["params"]):
        assert torch.equal(a.state[pa]["exp_avg_sq"], b.state[pb]["exp_avg_sq"])
        assert int(a.state[pa]["step"]) == int(b.state[pb]["step"]) == whole.steps
    assert a.param_groups[0]["lr"] == b.param_groups[0]["lr"]


def test_a_continuation_that_diverges_leaves_the_capped_run_as_it_was(monkeypatch):
    cpu = torch.device("cpu")
    capped = train_one(resolve(config(lr=3e-2, patience=2, max_steps=20)), cpu, False,
                       checkpoint=True)
    before = trained_fields(capped.record(cpu))
    step = RecallModule.training_step

    def diverging(self, batch, batch_idx):
        if self.steps_done >= 27:
            raise DivergedError(f"training loss became nan at step {self.steps_done}")
        return step(self, batch, batch_idx)

    monkeypatch.setattr(RecallModule, "training_step", diverging)
    with pytest.raises(DivergedError, match="at step 27$"):
        extend(capped, 160, cpu)
    assert trained_fields(capped.record(cpu)) == before


def test_only_a_run_stopped_at_its_cap_keeps_a_checkpoint():
    cpu = torch.device("cpu")
    early = train_one(resolve(config(lr=3e-2, patience=2, max_steps=200)), cpu, False,
                      checkpoint=True)
    assert early.steps < 200 and early.checkpoint is None
    assert train_one(resolve(config(lr=3e-2, max_steps=10)), cpu, False).checkpoint is None
    same = extend(early, 800, cpu)  # converged: nothing to go on with
    assert same.steps == early.steps and same.cfg.train.max_steps_limit == 800
