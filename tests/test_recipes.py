"""``train.recipe``: the paper code's linear recipe as a preset, and the default left as it was."""
from __future__ import annotations

import pytest
import torch

from recallbench.api.config import apply_overrides, resolve
from recallbench.api.errors import ConfigError

TINY = {"task": {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4},
        "model": {"adapter": "linear-mamba", "d_model": 8, "d_state": 4}}


def test_the_paper_recipe_resolves_to_the_values_of_the_papers_config():
    train = resolve({"train": {"recipe": "paper"}}).to_dict()["train"]
    # MQAR__D_N__linear_trained__regime_0.json5 of the paper's code
    assert {k: train[k] for k in (
        "recipe", "max_steps", "batch_size", "lr", "betas", "weight_decay", "label_smoothing",
        "grad_clip", "warmup_frac", "decay_frac", "early_stop", "val_every", "val_size",
        "test_size")} == {
        "recipe": "paper", "max_steps": 2000, "batch_size": 128, "lr": 0.01,
        "betas": [0.9, 0.95], "weight_decay": 0.0, "label_smoothing": 0.1, "grad_clip": 1.5,
        "warmup_frac": 0.05, "decay_frac": 0.75, "early_stop": None, "val_every": 250,
        "val_size": 10112, "test_size": 10112}
    assert "patience" not in train  # null, as in the default


def test_a_null_recipe_stays_out_of_the_config_and_every_old_hash_holds():
    default = resolve({})
    assert "recipe" not in default.to_dict()["train"]
    # the hashes of these configs before train.recipe existed
    assert default.hash() == "489cbf5f303e40f74091b56668854e36c5bd085ae3baa321e24cfafea27eb662"
    assert resolve({"train": {"recipe": None, "batch_size": 128, "grad_clip": 1.5}}).hash() == \
        "b167bf9386a08c9895e1dfe5354351cfe12fe5914c48f696b01eb0a185f40556"
    paper = resolve({"train": {"recipe": "paper"}})
    assert paper.hash() != default.hash()
    # the resolved config resolves to itself: a record's config reproduces its hash
    assert resolve(paper.to_dict()).hash() == paper.hash()


@pytest.mark.parametrize("sets", [
    ["train.recipe=paper", "train.batch_size=64 train.val_size=512"],
    ["train.batch_size=64 train.val_size=512", "train.recipe=paper"],
])
def test_explicit_keys_win_over_the_recipe_in_any_order(sets):
    train = resolve(apply_overrides({}, sets)).to_dict()["train"]
    assert train["batch_size"] == 64 and train["val_size"] == 512  # explicit
    assert train["grad_clip"] == 1.5 and train["val_every"] == 250  # the recipe's
    assert train["recipe"] == "paper"


def test_a_key_in_the_config_file_wins_too():
    raw = apply_overrides({"train": {"early_stop": 0.99, "decay_frac": 0.5}},
                          ["train.recipe=paper"])
    train = resolve(raw).to_dict()["train"]
    assert (train["early_stop"], train["decay_frac"], train["batch_size"]) == (0.99, 0.5, 128)


@pytest.mark.parametrize("value", ["fast", "Paper", 3, ["paper"]])
def test_an_unknown_recipe_is_one_line_naming_the_field_and_the_choices(value):
    with pytest.raises(ConfigError) as err:
        resolve({"train": {"recipe": value}})
    msg = str(err.value)
    assert msg.startswith("train.recipe = ") and "\n" not in msg
    assert msg.endswith("is not allowed: null (recallbench's default recipe) or one of: paper")


def test_cli_refuses_an_unknown_recipe_in_one_line(cli):
    rc, out, err = cli("run", "--set", "train.recipe=fast")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "train.recipe = 'fast' is not allowed" in err


def _module(train: dict, val_draw=None):
    from recallbench.harness.module import RecallModule
    from recallbench.harness.prepare import build_model

    cfg = resolve({**TINY, "train": {"progress": False, "threads": 1, **train}})
    _, model = build_model(cfg, torch.device("cpu"))
    return cfg, RecallModule(model, cfg.train, val_draw=val_draw)


def _learning_rates(train: dict, steps: list[int]) -> dict[int, float]:
    """The learning rate each (0-based) optimizer step trains with, read off the optimizer
    as the run's own scheduler sets it."""
    _, module = _module(train)
    conf = module.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    seen = {}
    for step in range(max(steps) + 1):
        if step in steps:
            seen[step] = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
    return seen


def test_the_paper_recipe_follows_the_papers_schedule():
    # the paper's _construct_scheduler_from_config, 100 warmup, 400 at max, 1500 cosine
    # decay to decay_factor 0, lr 0.01; the lr of step s (0-based) is 0.01 * f(s) with
    #   f(s) = s / 100                                   s < 100
    #        = 1                                         100 <= s < 500
    #        = 0.5 * (1 + cos(pi * (s - 500) / 1500))    500 <= s < 2000
    expected = {
        0: 0.0,                   # 0 / 100: the first update has lr 0
        1: 0.0001,                # 1 / 100
        50: 0.005,                # 50 / 100
        99: 0.0099,               # 99 / 100
        100: 0.01,
        250: 0.01,
        499: 0.01,
        500: 0.01,                # cos(0) = 1
        875: 0.008535533905932737,   # 0.5 * (1 + cos(pi / 4))
        1000: 0.0075,             # 0.5 * (1 + cos(pi / 3))
        1250: 0.005,              # 0.5 * (1 + cos(pi / 2))
        1625: 0.0014644660940672624,  # 0.5 * (1 + cos(3 pi / 4))
        1999: 1.0966223e-08,      # 0.5 * (1 + cos(pi * 1499 / 1500)) = sin^2(pi / 3000)
    }
    got = _learning_rates({"recipe": "paper"}, list(expected))
    for step, lr in expected.items():
        assert got[step] == pytest.approx(lr, rel=1e-6, abs=1e-15), step


def test_the_default_schedule_is_as_before():
    # recallbench's own warmup: (s + 1) / 100 over the first 5% of 2000 steps, flat to
    # step 999, then the cosine over the last 1000: 0.5 * (1 + cos(pi * (s - 1000) / 1000))
    expected = {0: 0.0001, 99: 0.01, 500: 0.01, 999: 0.01, 1000: 0.01, 1500: 0.005,
                1750: 0.0014644660940672624}
    got = _learning_rates({}, list(expected))
    for step, lr in expected.items():
        assert got[step] == pytest.approx(lr, rel=1e-9), step


def test_the_paper_recipe_validates_after_the_batch_of_index_k_times_250():
    _, paper = _module({"recipe": "paper"})
    assert [s for s in range(1, 2001) if paper.validates_after(s)] == \
        [251, 501, 751, 1001, 1251, 1501, 1751]  # and the last step, as every run
    _, default = _module({})
    assert [s for s in range(1, 101) if default.validates_after(s)] == [25, 50, 75, 100]


def test_each_validation_of_the_paper_recipe_scores_new_sequences():
    from recallbench.harness.data import FreshSets
    from recallbench.harness.single import train_one

    cfg = resolve({**TINY, "train": {"recipe": "paper", "batch_size": 8, "max_steps": 23,
                                     "val_every": 5, "val_size": 40, "test_size": 32,
                                     "progress": False, "threads": 1}})
    t = train_one(cfg, torch.device("cpu"), False)
    assert [s for s, _ in t.module.history.points] == [6, 11, 16, 21, 23]
    assert t.steps == 23 and t.module.history.stop_reason is None  # never early
    # the run drew five sets from its stream: the next one is its sixth
    replay = FreshSets(cfg.task, 40, cfg.train.seed)
    sets = [replay()[0] for _ in range(6)]
    assert torch.equal(t.module.val_draw()[0], sets[5])
    assert all(not torch.equal(sets[0], s) for s in sets[1:])
    other_seed = FreshSets(cfg.task, 40, cfg.train.seed + 1)()[0]
    assert not torch.equal(other_seed, sets[0])


def test_the_record_carries_the_recipe_and_its_resolved_values():
    from recallbench.harness.train import run

    rec = run({**TINY, "train": {"recipe": "paper", "batch_size": 8, "max_steps": 3,
                                 "val_size": 16, "test_size": 16, "threads": 1}},
              progress=False)
    train = rec["config"]["train"]
    assert train["recipe"] == "paper" and train["grad_clip"] == 1.5
    assert train["decay_frac"] == 0.75 and train["early_stop"] is None
    assert train["batch_size"] == 8 and rec["total"] == 16 * 4


def test_the_batched_ensemble_refuses_a_recipe():
    from recallbench.harness.ensemble import EnsembleError, run_ensemble

    cfg = resolve({**TINY, "train": {"recipe": "paper", "max_steps": 2}})
    with pytest.raises(EnsembleError, match=r"train.recipe = paper \(config 0\)"):
        run_ensemble([cfg])


def test_an_lr_search_under_the_paper_recipe_trains_its_candidates_one_by_one():
    from recallbench.harness.lr_candidates import candidates
    from recallbench.harness.train import run

    raw = {**TINY, "train": {"recipe": "paper", "lr": [0.003, 0.01], "batch_size": 8,
                             "max_steps": 3, "val_size": 16, "test_size": 16, "threads": 1}}
    assert all(c.train.recipe == "paper" for c in candidates(resolve(raw)))
    rec = run(raw, progress=False)
    assert rec["status"] == "ok" and "ensemble" not in rec
    assert rec["config"]["train"]["recipe"] == "paper"


def test_a_sweeps_unresolved_view_sees_the_recipes_values():
    """Skip rules and filters read configs before they resolve: they see the recipe's
    batch, an explicit key over it, and the default under an unknown recipe name (which
    resolving then refuses)."""
    from recallbench.runs.skip_rules import with_defaults

    assert with_defaults({"train": {"recipe": "paper"}})["train"]["batch_size"] == 128
    assert with_defaults({"train": {"recipe": "paper", "batch_size": 7}})["train"]["batch_size"] == 7
    assert with_defaults({"train": {"recipe": "nope"}})["train"]["batch_size"] == 64
