"""The search's futility stop, ``card_search.measure(futility=True)`` (tried in simulation,
not offered by the commands or suites: docs/results/capacity).  A bracketed card whose
interval target is out of the work budget's reach stops as a bound once a quarter of the
budget is spent, on a prefix of the runs the search without it trains; a measured or
unbracketed card never stops for it."""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import synthetic_cards as synth  # noqa: E402

from recallbench.runs import card_search  # noqa: E402
from test_spread_target import BASE  # noqa: E402
#: a shallow, noisy layer (Mamba-2's corner) whose 1.3 interval a 200-Mtok budget cannot buy
NOISY = synth.Truth(n50=12.0, slope=0.7, tau=0.5, failure_rate=0.0)
QUIET = synth.Truth(n50=12.0, slope=1.6, tau=0.1, failure_rate=0.0)


def _search(truth, futility, budget=200.0, seed=2):
    cell = synth.runner(truth, np.random.default_rng(seed))
    return card_search.measure(BASE, run_cell=cell, work_budget=budget, max_batches=96,
                               say=lambda _: None, futility=futility)


def test_a_card_out_of_reach_stops_sooner_on_a_prefix_of_the_same_runs():
    full, short = _search(NOISY, False), _search(NOISY, True)
    assert full.card["status"] == short.card["status"] == "bound"
    assert short.stopped.startswith("futility: its N50 interval spans a factor")
    assert "past the work budget of 200" in short.stopped
    assert not full.stopped.startswith("futility")
    ran = [r["config_hash"] for r in full.records]
    assert [r["config_hash"] for r in short.records] == ran[:len(short.records)]
    assert len(short.records) < len(full.records)
    # not before a quarter of the budget is spent; the card was bracketed when it stopped
    assert short.card["work_mtok"] >= card_search.FUTILITY_AFTER * 200.0
    assert short.card["criteria"]["bracketed"]


def test_a_card_the_budget_can_measure_is_never_stopped_for_futility():
    plain, judged = _search(QUIET, False, budget=1000.0), _search(QUIET, True, budget=1000.0)
    assert plain.card["status"] == judged.card["status"] == "measured"
    assert [r["config_hash"] for r in judged.records] == [r["config_hash"] for r in plain.records]


def _card(spread, bracketed=True, status="bound", target=1.4):
    return {"status": status, "criteria": {"spread": spread, "bracketed": bracketed,
                                           "max_spread": target}}


def test_futile_judges_only_bracketed_unmeasured_cards_past_a_quarter_of_the_budget():
    budget = 1000e6
    early = card_search.FUTILITY_AFTER * budget * 0.99
    assert card_search.futile(_card(50.0), early, budget) is None  # too early to judge
    assert card_search.futile(_card(50.0), budget / 2, budget)  # far out of reach
    assert card_search.futile(_card(50.0, bracketed=False), budget / 2, budget) is None
    assert card_search.futile(_card(50.0, status="measured"), budget / 2, budget) is None
    assert card_search.futile(_card(None), budget / 2, budget) is None  # an infinite interval
    # at its target (a card not yet measured for its slope or runs) it is within reach
    assert card_search.futile(_card(1.4), 0.9 * budget, budget) is None
    # the verdict only turns from "go on" to "stop" as the interval widens
    verdicts = [card_search.futile(_card(s), budget / 2, budget) is not None
                for s in np.linspace(1.3, 4.0, 28)]
    assert verdicts == sorted(verdicts) and verdicts[0] is False and verdicts[-1] is True
