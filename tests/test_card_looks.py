"""benchmarks/card_looks.py: every look of a synthetic card, and stopping rules read from
them; the card's rule must make the card the card search makes."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

import card_coverage  # noqa: E402
import card_looks  # noqa: E402

QUIET = (12.0, 1.5, 0.1, 0.0)  # a truth whose cards are measured within a few batches


@pytest.mark.parametrize("index", [0, 1, 2])
def test_the_cards_rule_stops_where_the_card_search_stops(index):
    """Searched on past its first measured look, a card's first look whose fit's interval,
    widened as the card widens it, spans at most 1.3 (its fitted slope at most the card's
    cap) is the card the search itself makes from the same draws: same runs, same interval."""
    w = card_looks.WIDEN
    row = card_looks.one_card((index, 3, QUIET, 24, 300.0, 1.2, 0))
    stop = card_looks.stop_at(row["looks"], 1.3 ** (1 / w), 1, cap=card_looks.MAX_SLOPE)
    own = card_coverage.one_card((index, 3, False, 300.0, 0.0, False, QUIET, 24))
    assert own["status"] == "measured" and stop is not None
    assert stop["runs"] == own["runs"]
    lo, hi = card_looks.widened(stop, w)
    assert lo == pytest.approx(own["lo"], rel=1e-9) and hi == pytest.approx(own["hi"], rel=1e-9)
    # and it went on: a later look is narrower, down to the floor or the batch limit
    assert row["looks"][-1]["runs"] > stop["runs"] or stop["spread"] <= 1.2


def test_a_card_the_search_leaves_a_bound_has_no_stop_within_the_same_limits():
    truth = (20.0, 1.3, 0.2, 0.0)  # seed 3, card 0: the 300 Mtok run out at 18 runs
    own = card_coverage.one_card((0, 3, False, 300.0, 0.0, False, truth, 24))
    row = card_looks.one_card((0, 3, truth, 24, 300.0, 1.2, 0))
    rule = 1.3 ** (1 / card_looks.WIDEN)
    assert own["status"] == "bound"
    assert card_looks.stop_at(row["looks"], rule, 1, cap=card_looks.MAX_SLOPE) is None
    assert row["looks"][-1]["runs"] == own["runs"]


def look(runs, spread, status="measured", lo=1.0, hi=2.0, observed=8):
    """A look; "bound" here means its cells do not bracket N50."""
    return {"runs": runs, "status": status, "spread": spread, "lo": lo, "hi": hi,
            "bracketed": status == "measured", "observed": observed}


def test_a_rule_stops_at_the_first_run_of_k_looks_within_its_spread():
    looks = [look(2, None, "bound"), look(4, 1.29), look(6, 1.31), look(8, 1.27),
             look(10, 1.25), look(12, 1.24)]
    assert card_looks.stop_at(looks, 1.3, 1)["runs"] == 4
    assert card_looks.stop_at(looks, 1.3, 2)["runs"] == 10  # 1.31 broke the first run
    assert card_looks.stop_at(looks, 1.25, 1)["runs"] == 10
    assert card_looks.stop_at(looks, 1.2, 1) is None


def test_a_look_steeper_than_the_cap_is_no_stop():
    looks = [look(8, 1.2), look(10, 1.25), look(12, 1.28)]
    for lk, slope in zip(looks, (3.4, 2.0, 1.7)):
        lk["slope"] = slope
    assert card_looks.stop_at(looks, 1.3, 1)["runs"] == 8
    assert card_looks.stop_at(looks, 1.3, 1, cap=card_looks.MAX_SLOPE)["runs"] == 10
    assert card_looks.stop_at(looks, 1.3, 1, cap=1.9)["runs"] == 12
    assert card_looks.stop_at(looks, 1.3, 1, cap=1.5) is None


def test_a_look_short_of_uncensored_runs_or_unbracketed_is_no_stop():
    looks = [look(4, 1.1, observed=7), look(6, 1.1, "bound"), look(8, 1.1)]
    assert card_looks.stop_at(looks, 1.3, 1)["runs"] == 8


def test_below_n_ref_runs_a_rule_asks_for_a_narrower_fit_and_widens_it_more():
    """n_ref 32: at 8 uncensored runs the widening grows twofold, so the fit must span at
    most 1.3^(1/(1.15·2)); from 32 runs on it is the constant rule's."""
    w, base = card_looks.WIDEN, 1.3 ** (1 / card_looks.WIDEN)
    looks = [look(8, 1.2, observed=8), look(16, 1.15, observed=16), look(40, 1.25, observed=32)]
    assert card_looks.stop_at(looks, base, 1)["runs"] == 8
    assert card_looks.growth(looks[0], 32) == pytest.approx(2.0)
    assert card_looks.stop_at(looks, base, 1, 32)["runs"] == 16
    assert card_looks.stop_at(looks[2:], base, 1, 32)["runs"] == 40
    row = {"truth": {"n50": 2.1}, "looks": looks[1:2]}  # (1, 2) widened 1.15·√2 about N50
    row["looks"][0].update(n50=1.4, lo=1.3, hi=1.5)
    lo, hi = card_looks.widened(row["looks"][0], w * 2 ** 0.5)
    assert lo < 1.3 and hi > 1.5 and not lo <= 2.1 <= hi
    assert card_looks.evaluate([row], base, 1, w, 32)["covered"] == 0
    row["truth"]["n50"] = (1.5 + hi) / 2  # beyond the fit's interval, inside the widened one
    assert card_looks.evaluate([row], base, 1, w, 32)["covered"] == 1


def test_coverage_counts_the_stops_that_cover_the_truth():
    rows = [{"truth": {"n50": 1.5}, "looks": [look(4, 1.29, lo=1.0, hi=2.0)]},
            {"truth": {"n50": 3.0}, "looks": [look(6, 1.28, lo=1.0, hi=2.0)]},
            {"truth": {"n50": 3.0}, "looks": [look(6, 1.5, "bound")]}]
    e = card_looks.evaluate(rows, 1.3, 1)
    assert (e["cards"], e["measured"], e["covered"], e["runs"]) == (3, 2, 1, 5.0)


def test_a_bad_floor_is_one_line_naming_it():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "card_looks.py"),
                          "--cards", "1", "--floor", "1.5"], capture_output=True, text=True)
    assert res.returncode == 2
    assert "--floor 1.5 is not allowed: a spread in (1, 1.3]" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_widened_rule_stretches_the_interval_about_n50_on_the_log_scale():
    assert card_looks.widened({"n50": 2.0, "lo": 1.0, "hi": 4.0}, 2.0) == pytest.approx((0.5, 8.0))
    rows = [{"truth": {"n50": 0.7}, "looks": [{**look(4, 1.2, lo=1.0, hi=4.0), "n50": 2.0}]}]
    assert card_looks.evaluate(rows, 1.3, 1)["covered"] == 0
    assert card_looks.evaluate(rows, 1.3, 1, 2.0)["covered"] == 1
