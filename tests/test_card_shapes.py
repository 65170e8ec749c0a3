"""capacity --shapes (runs.card_shapes, cli.capacity_shapes): one card per state shape at the
same S, and a comparison that never ranks overlapping intervals, on runs simulated from known
truths (as tests/test_card_method.py) and, slow, the designed model for real."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import special

from recallbench.api.canonical import config_hash
from recallbench.api.errors import ConfigError
from recallbench.law import run_card
from recallbench.runs import card_search, card_shapes
from recallbench.runs.capacity import cell_config

BASE = {"task": {"name": "mqar", "vocab_size": 512, "num_facts": 2, "seq_len": 8},
        "model": {"adapter": "linear-mamba", "d_model": 32, "d_state": 4, "expand": 2},
        "train": {"lr": [0.003, 0.01, 0.03], "max_steps": 2000, "max_steps_limit": 8000,
                  "patience": 10, "batch_size": 32, "val_every": 50, "early_stop": 0.999,
                  "val_size": 512, "test_size": 1024}}


def runner(n50_by_key, slope=1.3, tau=0.15, seed=0):
    """run_cell whose true N50 depends on the config's key (d_state), records as the
    harness makes them (S from the config: expand·D·N)."""
    rng = np.random.default_rng(seed)

    def run_cell(cfgs):
        recs = []
        for c in cfgs:
            m, nf = c["model"], c["task"]["num_facts"]
            q = special.ndtr(slope * (math.log(n50_by_key[m["d_state"]]) - math.log(nf))
                             + tau * rng.normal())
            total, g = 1024 * nf, 1.0 / nf
            recs.append({"status": "ok", "correct": int(rng.binomial(total, g + (1 - g) * q)),
                         "total": total, "converged": True, "stop_reason": "plateau",
                         "state_size": m["expand"] * m["d_model"] * m["d_state"],
                         "state_bits": 32, "steps": 2000, "seed": c["train"]["seed"],
                         "config": c, "config_hash": config_hash(c), "cpu_s": 1.0,
                         "wall_s": 1.0, "lr": 0.01,
                         "lr_search": [{"lr": lr, "steps": 2000} for lr in (0.003, 0.01, 0.03)]})
        return recs

    return run_cell


def grid(truth):
    """``search(shape)`` that trains a fixed grid instead of searching (one fit a card, fast):
    5 cells around the true N50 × 4 seeds, the card built as the search builds it."""
    def search(shape):
        n50 = truth[shape.value]
        cfgs = [cell_config(shape.base, max(2, round(n50 * f)), seed)
                for f in (0.5, 0.7, 1.0, 1.4, 2.0) for seed in range(4)]
        records = runner(truth, seed=shape.value)(cfgs)
        return card_search.Result(run_card.build_run_card(records), "a fixed grid", records)

    return search


def test_the_plan_keeps_s_and_refuses_what_the_layer_cannot_realise():
    shapes = card_shapes.plan(BASE, "key", [2, 8])
    assert [s.name for s in shapes] == ["key-2", "key-8"]
    assert [(s.base["model"]["d_state"], s.base["model"]["expand"]) for s in shapes] == [(2, 4), (8, 1)]
    assert all(math.prod(s.shape.values()) == 256 for s in shapes)
    with pytest.raises(ConfigError, match=r"--shapes key=16 is not allowed: adapter linear-mamba "
                                          r"at S = 256 realises key in \{1, 2, 4, 8\}"):
        card_shapes.plan(BASE, "key", [4, 16])
    with pytest.raises(ConfigError, match="--shapes slots is not allowed: .*terms layers, heads, key, value"):
        card_shapes.plan(BASE, "slots", [1, 2])
    attention = {**BASE, "model": {"adapter": "attention", "d_model": 32}}
    with pytest.raises(ConfigError, match="not allowed for adapter attention: its state has no shape"):
        card_shapes.plan(attention, "key", [4, 8])
    for bad in ("key", "key=4", "key=4,4", "key=0,4", "key=a,b", "=4,8"):
        with pytest.raises(ConfigError, match="is not allowed: TERM=V1,V2"):
            card_shapes.parse(bad)
    assert card_shapes.parse("heads=1,2,4") == ("heads", [1, 2, 4])


def test_each_shape_gets_its_own_card_and_the_separable_best_is_named():
    """True N50 8, 14 and 30 at keys 2, 4, 8: three measured cards, each recording its shape,
    and key-8 named highest by both N50 per kbit and S_eff/S (intervals apart)."""
    done = card_shapes.measure(card_shapes.plan(BASE, "key", [2, 4, 8]),
                               grid({2: 8.0, 4: 14.0, 8: 30.0}), say=lambda _: None)
    cards = {s.name: r.card for s, r in done}
    assert all(c["status"] == "measured" for c in cards.values())
    for s, r in done:
        assert r.card["state_shape"] == s.shape and r.card["state_size"] == 256
        assert r.card["state_shape"]["key"] == s.value
    summ = card_shapes.summary(done)
    for metric in card_shapes.METRICS:
        best = summ["best"][metric]
        assert best["verdict"] == "highest" and best["shape"] == "key-8" and not best["overlaps"]
        lo = best["ci"][0]
        assert all(cards[n][metric]["ci"][1] < lo for n in ("key-2", "key-4"))
    assert "key-8 recalls most per state" in card_shapes.verdict_line(summ["best"]["ratio"], "ratio")
    md = card_shapes.render_markdown(summ)
    assert "[key-4/card.md](key-4/card.md)" in md and "key 8 × value 32" in md
    assert json.loads(json.dumps(summ))["schema"] == card_shapes.SCHEMA


def test_overlapping_intervals_are_not_separable():
    """True N50 20 and 21: the highest point estimate is reported, but not as higher."""
    done = card_shapes.measure(card_shapes.plan(BASE, "key", [4, 8]),
                               grid({4: 20.0, 8: 21.0}), say=lambda _: None)
    best = card_shapes.summary(done)["best"]["n50_per_kbit"]
    assert best["verdict"] == "not separable" and len(best["overlaps"]) == 1
    line = card_shapes.verdict_line(best, "n50_per_kbit")
    assert line.startswith("N50 per kbit: not separable") and "recalls most" not in line


def _card(status, value, ci, bound=None):
    return {"status": status, "n50": {"value": value, "ci": ci, "bound": bound},
            "n50_per_kbit": {"value": value, "ci": ci}, "ratio": {"value": value, "ci": ci}}


def test_bounds_count_with_their_open_side():
    """A lower bound's interval reaches ∞: it may exceed the best measured card, so not
    separable; an upper bound below the best's interval does not stop the ranking; no
    measured card: nothing is ranked."""
    measured = _card("measured", 10.0, [9.0, 11.0])
    low = _card("bound", None, [5.0, None], "lower")
    upper = _card("no recall", None, [0.0, 4.0], "upper")
    assert card_shapes.rank({"a": measured, "b": low}, "n50_per_kbit")["verdict"] == "not separable"
    got = card_shapes.rank({"a": measured, "c": upper}, "n50_per_kbit")
    assert got["verdict"] == "highest" and got["shape"] == "a"
    assert card_shapes.rank({"b": low, "c": upper}, "ratio")["verdict"] == "no measured card"
    touching = _card("measured", 8.0, [7.0, 9.0])
    assert card_shapes.rank({"a": measured, "t": touching}, "ratio")["verdict"] == "not separable"


def test_the_command_writes_a_card_per_shape_and_the_comparison(cli, tmp_path, monkeypatch):
    """capacity --shapes with the search replaced by simulated grids (its arguments those
    of card_search.run): OUT/key-2, OUT/key-8 hold normal method-2 cards, shapes.md names
    key-8; --dry-run lists the shapes only."""
    search, calls = grid({2: 8.0, 8: 30.0}), []

    def run(base, *, seeds, store, workers, work_budget, max_batches, max_step, time_limit_s,
            max_spread):
        assert max_spread is None  # the method's own target unless --max-spread sets one
        calls.append((base["model"]["d_state"], seeds, work_budget))
        return search(next(s for s in card_shapes.plan(BASE, "key", [2, 8])
                           if s.base["model"] == base["model"]))

    monkeypatch.setattr(card_search, "run", run)
    args = ["capacity", "--adapter", "linear-mamba", "--d-model", "32", "--d-state", "4",
            "--set", "model.expand=2", "--shapes", "key=2,8", "--out", "cards"]
    rc, out, err = cli(*args, "--dry-run")
    assert rc == 0, err
    assert "key-2: layers 1 × heads 1 × key 2 × value 128 (d_state 2, expand 4)" in out
    assert not (tmp_path / "cards").exists()
    rc, out, err = cli(*args)
    assert rc == 0, err
    for name, key in (("key-2", 2), ("key-8", 8)):
        card = json.loads((tmp_path / "cards" / name / "card.json").read_text())
        assert card["schema"] == "recallbench.card/2" and card["state_shape"]["key"] == key
        assert card["state_size"] == 256 and (tmp_path / "cards" / name / "card.md").exists()
    assert "N50 per kbit: key-8 recalls most per state" in out
    assert calls == [(2, [0, 1], 300.0), (8, [0, 1], 300.0)]
    summ = json.loads((tmp_path / "cards" / "shapes.json").read_text())
    assert summ["best"]["n50_per_kbit"]["shape"] == "key-8"
    rc, out, err = cli(*args[:-4], "--shapes", "key=4,16", "--out", "cards", "--dry-run")
    assert rc == 2 and "--shapes key=16 is not allowed" in err and "{1, 2, 4, 8}" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_designed_model_at_two_shapes_for_real(cli, tmp_path):
    """The designed model (nothing to train) at S = 2·32·8 = 512, keys 4 and 8 (D 64 and
    32): two cards from real runs, each with its shape, and the comparison written."""
    rc, out, err = cli("capacity", "--adapter", "designed", "--d-model", "32", "--d-state", "8",
                       "--vocab-size", "128", "--seeds", "0", "--workers", "1",
                       "--set", "train.test_size=256", "--work-budget", "20",
                       "--shapes", "key=4,8", "--out", "cards")
    assert rc == 0, err
    for name, d in (("key-4", 64), ("key-8", 32)):
        card = json.loads((tmp_path / "cards" / name / "card.json").read_text())
        assert card["model"]["d_model"] == d and card["state_size"] == 512
        assert card["state_shape"] == {"layers": 1, "heads": 1, "key": int(name[4:]), "value": 2 * d}
    assert (tmp_path / "cards" / "shapes.md").read_text().count("| key-") == 2
