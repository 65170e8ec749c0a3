"""The N50 interval's target as a setting: ``card_search.measure(max_spread=F)``,
``recallbench capacity --max-spread F`` and a method-2 suite's ``capacity.max_spread``.
A looser target stops the same search sooner, on a prefix of the same runs; a target
outside [1.3, 2] is refused before anything trains; a suite's target reaches its cards,
their validation and its board's text."""
import contextlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import synthetic_cards as synth  # noqa: E402

from recallbench import leaderboard as lb  # noqa: E402
from recallbench.api.errors import ConfigError  # noqa: E402
from recallbench.law import run_card  # noqa: E402
from recallbench.leaderboard.capacity import board2  # noqa: E402
from recallbench.leaderboard.capacity import method2  # noqa: E402
from recallbench.leaderboard.capacity import suite as capacity_suite  # noqa: E402
from recallbench.leaderboard.points import point_records  # noqa: E402
from recallbench.leaderboard.recompute import expected_state  # noqa: E402
from recallbench.leaderboard.submission import _budget_entry  # noqa: E402
from recallbench.runs import capacity, card_search  # noqa: E402
from test_capacity_suite_v2 import _simulated, _suite_dir  # noqa: E402

BASE = {"task": {"name": "mqar", "vocab_size": 512},
        "model": {"adapter": "linear-mamba", "d_model": 32, "d_state": 8},
        "train": {**card_search.TRAIN, "lr": [0.003, 0.01, 0.03], "batch_size": 32}}
TRUTH = synth.Truth(n50=12.0, slope=1.2, tau=0.45, failure_rate=0.0)


def _search(max_spread):
    cell = synth.runner(TRUTH, np.random.default_rng(3))
    return card_search.measure(BASE, run_cell=cell, work_budget=1e5, max_batches=96,
                               say=lambda _: None, max_spread=max_spread)


def test_a_looser_target_stops_the_same_search_sooner_on_the_same_runs():
    strict, loose = _search(None), _search(1.6)
    assert strict.card["status"] == loose.card["status"] == "measured"
    assert strict.card["criteria"]["max_spread"] == 1.3
    assert loose.card["criteria"]["max_spread"] == 1.6
    lo, hi = loose.card["n50"]["ci"]
    assert hi / lo <= 1.6 + 1e-9
    ran = [r["config_hash"] for r in strict.records]
    assert [r["config_hash"] for r in loose.records] == ran[:len(loose.records)]
    assert len(loose.records) < len(strict.records)
    # the strict card at the loose card's runs, judged at 1.3: not yet measured
    assert run_card.build_run_card(loose.records)["status"] == "bound"


@pytest.mark.parametrize("bad", [1.2, 2.5, math.nan, "1.5", True])
def test_a_target_outside_the_range_is_refused_before_anything_trains(bad):
    def boom(cfgs):
        raise AssertionError("trained")

    with pytest.raises(ConfigError, match=r"max_spread .* is not allowed: the N50 interval's "
                                          r"target \(upper / lower\), a number in \[1.3, 2\]"):
        card_search.measure(BASE, run_cell=boom, max_spread=bad)


def test_a_suite_s_target_reaches_its_cards_their_validation_and_its_board(tmp_path,
                                                                            monkeypatch):
    suite = lb.load_suite(_suite_dir(tmp_path, max_spread=1.6, work_budget_mtok=400,
                                     max_batches=40))
    assert method2.settings(suite)["max_spread"] == 1.6 and method2.target(suite) == 1.6
    default = lb.load_suite(_suite_dir(tmp_path / "default"))
    assert "max_spread" not in method2.settings(default) and method2.target(default) == 1.3
    assert suite.recipe_sha256 != default.recipe_sha256
    adapter = "linear-mamba"
    base = capacity_suite.budget_base(suite, adapter, suite.budgets[0])
    made: list[dict] = []
    state, _ = expected_state(base["model"], "test")
    sim = _simulated(state, n50=12.0, slope=1.2, tau=0.3, seed=5)

    @contextlib.contextmanager
    def trained(store, workers=1, say=None, executor=None):
        yield {}, lambda cfgs: made.extend(sim(cfgs)) or made[-len(cfgs):]

    monkeypatch.setattr(capacity, "trained", trained)
    card = capacity_suite.run_capacity_suite(suite, adapter, tmp_path / "store",
                                             log=lambda m: None)["D32-N8"]
    assert card["status"] == "measured" and card["criteria"]["max_spread"] == 1.6
    # its runs replay to the same card at the suite's target, and at 1.3 to another
    again = capacity_suite._replay(suite, base, made).card
    assert again["n50"] == card["n50"] and again["criteria"]["max_spread"] == 1.6
    assert card_search.replay(base, made, seeds=suite.seeds,
                              **method2.settings(default)).stopped != "measured"
    (b, pairs, stored), = capacity_suite.capacity_points(suite, made, adapter)
    entry = {**_budget_entry(b, pairs), "card": stored}
    sub = {"budgets": [entry], "model": {"adapter": adapter}}
    capacity_suite.check_cards(sub, suite, "sub", lambda bb: point_records({"budgets": [bb]}))
    forged = {**entry, "card": {**stored, "criteria": {**stored["criteria"], "max_spread": 1.3}}}
    with pytest.raises(ConfigError, match="card.criteria does not match the card recomputed"):
        capacity_suite.check_cards({**sub, "budgets": [forged]}, suite, "sub",
                                   lambda bb: point_records({"budgets": [bb]}))
    assert "spans at most a factor 1.6" in board2.how_to_read(method2.target(suite))
    assert dict(board2.intro_items(suite))["search"].endswith("a card measured within a "
                                                              "factor 1.6")


def test_the_command_passes_its_target_to_the_search_and_the_card_keeps_it(cli, tmp_path,
                                                                           monkeypatch):
    """capacity --max-spread 1.6, the search's training replaced by simulated runs: the
    search is asked for 1.6, and card.json records it."""
    asked = []
    real = card_search.measure

    def run(base, *, seeds, store, workers, say=print, executor=None, **kw):
        asked.append(kw.get("max_spread"))
        cell = synth.runner(TRUTH, np.random.default_rng(3))
        kw = {k: v for k, v in kw.items() if k != "time_limit_s"}
        return real(base, seeds=seeds, run_cell=cell, say=say, **kw)

    monkeypatch.setattr(card_search, "run", run)
    rc, out, err = cli("capacity", "--adapter", "linear-mamba", "--d-model", "32",
                       "--d-state", "8", "--work-budget", "100000", "--max-cells", "96",
                       "--max-spread", "1.6", "--out", "card")
    assert rc == 0, err
    assert asked == [1.6]
    card = json.loads((tmp_path / "card" / "card.json").read_text())
    assert card["criteria"]["max_spread"] == 1.6 and card["status"] == "measured"
