"""Re-seeding a method-2 card (``leaderboard verify --reseed``) and the agreement of two
cards (``law.card_agreement``): the rule against its stated probabilities, end to end on the
designed model, and the user's mistakes in one line."""
import json
import math

import numpy as np
import pytest

from recallbench.law.card_agreement import agreement, describe, n50_range
from recallbench.leaderboard.capacity import reseed as rs
from test_capacity_suite_v2 import board2  # noqa: F401  (the module's fixture)
from test_leaderboard_tamper import _assert_one_line

V3_SUB = "leaderboards/cpu-v3/submissions"


def _card(value, lo, hi, status="measured", bound=None):
    return {"status": status, "n50": {"value": value, "ci": [lo, hi], "bound": bound}}


def test_the_range_of_each_kind_of_card():
    assert n50_range(_card(10, 9, 11)) == (9, 11)
    assert n50_range(_card(10, 9, 13, "bound", "interval")) == (9, 13)
    assert n50_range(_card(30, 25, None, "bound", "lower")) == (25, math.inf)
    assert n50_range(_card(2, 1, 3, "bound", "upper")) == (0.0, 3)
    assert n50_range({"status": "bound", "n50": None}) is None


def test_overlap_inside_and_the_bounds():
    a = agreement(_card(10, 9, 11), _card(10.5, 9.8, 11.3))
    assert a["agree"] and a["inside"] == [True, True] and a["ratio"] == pytest.approx(1.05)
    a = agreement(_card(10, 9, 11), _card(12.5, 11.5, 13.5))
    assert a["agree"] is False and "DISAGREE" in describe(a)
    a = agreement(_card(10, 9, 11), _card(11.6, 10.8, 12.4))
    assert a["agree"] and a["inside"] == [False, False] and "0 of 2 points" in describe(a)
    # a lower bound agrees with any measurement above its floor, not with one below it
    assert agreement(_card(30, 25, None, "bound", "lower"), _card(40, 36, 44))["agree"]
    assert agreement(_card(30, 25, None, "bound", "lower"), _card(20, 18, 22))["agree"] is False
    nothing = agreement({"status": "bound", "n50": None}, _card(10, 9, 11))
    assert nothing["agree"] is None and "cannot be compared" in describe(nothing)


def test_the_rule_s_rates_for_covering_intervals_are_the_stated_ones():
    """Independent 95% intervals of equal width (log scale) around one N50: they overlap in
    99.4% of pairs and each point lies in the other's interval in 83.4% (the docstring)."""
    rng = np.random.default_rng(7)
    n, se, z = 20000, 0.08, 1.959964
    x = math.log(10) + se * rng.standard_normal((n, 2))
    overlap = inside = 0
    for xa, xb in x:
        a = _card(math.exp(xa), math.exp(xa - z * se), math.exp(xa + z * se))
        b = _card(math.exp(xb), math.exp(xb - z * se), math.exp(xb + z * se))
        g = agreement(a, b)
        overlap += g["agree"]
        inside += g["inside"][0]
    sd = lambda p: math.sqrt(p * (1 - p) / n)  # noqa: E731
    assert abs(overlap / n - 0.9944) < 4 * sd(0.9944)
    assert abs(inside / n - 0.8342) < 4 * sd(0.8342)


def test_default_seeds_are_disjoint_from_the_suite_s():
    assert rs.default_seeds([0, 1]) == [2, 3]
    assert rs.default_seeds([0, 2, 5]) == [1, 3, 4]


def test_reseed_re_runs_the_card_from_disjoint_seeds_and_resumes(board2, cli, tmp_path):  # noqa: F811
    suite, path, sub, _ = board2
    store = tmp_path / "reseed"
    rc, out, err = cli("leaderboard", "verify", str(path), "--reseed", "--store", str(store))
    assert rc == 0, err + out
    assert "with seeds 2, 3 (submitted: 0, 1)" in out
    assert "agree (the ranges overlap)" in out and "reseed ok: 1 of 1 card(s)" in out
    seeds = {json.loads(line)["config"]["train"]["seed"]
             for line in (store / "results.jsonl").read_text().splitlines()}
    assert seeds and all(s % 1000 in (2, 3) for s in seeds)
    lines = (store / "results.jsonl").read_text().count("\n")
    rc, out2, err = cli("leaderboard", "verify", str(path), "--reseed", "--store", str(store))
    assert rc == 0 and (store / "results.jsonl").read_text().count("\n") == lines  # nothing new
    assert out2.splitlines()[-2:] == out.splitlines()[-2:]


def test_a_disagreement_exits_1(board2, cli, tmp_path, monkeypatch):  # noqa: F811
    _, path, _, _ = board2
    monkeypatch.setattr(rs, "agreement",
                        lambda a, b: {**agreement(a, b), "agree": False})
    rc, out, _ = cli("leaderboard", "verify", str(path), "--reseed", "--store",
                     str(tmp_path / "s"), "--seeds", "4,5")
    assert rc == 1 and "reseed FAILED: 0 of 1 card(s)" in out


@pytest.mark.parametrize("extra, name", [
    (["--seeds", "0,7"], "--seeds: 0 is one of the submission's seeds"),
    (["--seeds", "2,2"], "--seeds 2,2: must be distinct"),
    (["--seeds", "2,x"], "--seeds 2,x: must be integers"),
    (["--seeds", "2,1000"], "--seeds: 1000 is not allowed"),
    (["--workers", "0"], "--workers 0 is not allowed"),
    ([], "--reseed needs --store DIR"),
])
def test_bad_reseed_flags_are_one_line(board2, cli, tmp_path, extra, name):  # noqa: F811
    _, path, _, _ = board2
    store = [] if not extra else ["--store", str(tmp_path / "s")]
    rc, _, err = cli("leaderboard", "verify", str(path), "--reseed", *store, *extra)
    _assert_one_line(rc, err, name.split(":")[0].split(" ")[0], name)
    assert not (tmp_path / "s").exists()


def test_a_method_1_submission_is_refused_in_one_line(cli, tmp_path):
    from pathlib import Path

    sub = sorted(Path(__file__).parents[1].joinpath(V3_SUB).glob("*.yaml"))[0]
    rc, _, err = cli("leaderboard", "verify", str(sub), "--reseed", "--store",
                     str(tmp_path / "s"))
    _assert_one_line(rc, err, "--reseed", "not a method-2 capacity suite")
