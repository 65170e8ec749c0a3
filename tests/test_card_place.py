"""A new method-2 card placed among a board's cards at its budget and protocol
(``leaderboard.capacity.place``): the board's ranking rule, and no board when the sizes, V
or protocol differ."""
import copy

import pytest

from recallbench.leaderboard.capacity.place import placement
from recallbench.leaderboard.capacity.suite import budget_base
from test_capacity_suite_v2 import board2  # noqa: F401  (the module's fixture)


def _card(sub, value, lo, hi, status="measured"):
    card = copy.deepcopy(sub["budgets"][0]["card"])
    card.update(status=status, model=sub["budgets"][0]["config"]["model"],
                n50_per_kbit={"value": value, "ci": [lo, hi]})
    return card


def test_a_card_is_placed_by_the_board_s_rule(board2):  # noqa: F811
    suite, _, sub, _ = board2
    train = budget_base(suite, "linear-mamba", suite.budgets[0])["train"]  # a layer that trains
    assert isinstance(train["lr"], list)
    designed = budget_base(suite, "designed", suite.budgets[0])["train"]  # one lr, as the suite
    assert placement(_card(sub, 1.0, 0.9, 1.1), designed, suite.dir.parent)[0].startswith("on ")
    theirs = sub["budgets"][0]["card"]["n50_per_kbit"]
    lo, hi = theirs["ci"]
    above = placement(_card(sub, 10 * hi, 9 * hi, 11 * hi), train, suite.dir.parent)
    assert len(above) == 1 and "would rank 1;" in above[0] and "1 card(s) lie entirely below" in above[0]
    assert f"on {suite.name} at D32-N8 (1 measured card(s), same protocol)" in above[0]
    below = placement(_card(sub, lo / 10, lo / 20, lo / 5), train, suite.dir.parent)
    assert "would rank 2 (above it: designed)" in below[0]
    same = placement(_card(sub, theirs["value"], lo, hi), train, suite.dir.parent)
    assert "would rank 1;" in same[0] and "1 overlap it" in same[0]
    bound = placement(_card(sub, 1.0, 0.5, 2.0, status="bound"), train, suite.dir.parent)
    assert "not ranked, the card is bound" in bound[0]


@pytest.mark.parametrize("change", ["sizes", "vocab", "protocol"])
def test_no_board_when_the_budget_v_or_protocol_differ(board2, change):  # noqa: F811
    suite, _, sub, _ = board2
    train = dict(budget_base(suite, "designed", suite.budgets[0])["train"])
    card = _card(sub, 1.0, 0.9, 1.1)
    if change == "sizes":
        card["model"] = {**card["model"], "d_state": 4}
    elif change == "vocab":
        card["task"] = {**card["task"], "vocab_size": 256}
    else:
        train["lr_rung"] = 0.25
    (line,) = placement(card, train, suite.dir.parent)
    assert line.startswith("no method-2 board in")


@pytest.mark.slow
def test_the_capacity_command_prints_its_place(board2, cli, tmp_path, monkeypatch):  # noqa: F811
    from recallbench.cli import capacity as cap_cli

    suite, _, _, _ = board2
    monkeypatch.setattr(cap_cli, "BOARDS", suite.dir.parent)
    args = ("capacity", "--adapter", "designed", "--d-model", "32", "--d-state", "8",
            "--work-budget", "40", "--out", str(tmp_path / "card"))
    rc, out, err = cli(*args, "--set", "train.lr_rung=null")  # the board's protocol
    assert rc == 0, err
    assert f"on {suite.name} at D32-N8 (1 measured card(s), same protocol)" in out
    rc, out, err = cli(*args, "--out", str(tmp_path / "card2"))  # halving: another protocol
    assert rc == 0 and "no method-2 board in" in out, err
