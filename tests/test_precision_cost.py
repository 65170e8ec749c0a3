"""benchmarks/precision_cost.py: a board's cards replayed under a looser interval target.
At the board's own target the replay must give back the submitted card (its runs, work and
interval: the submission is the independent reference); at a looser one, a prefix of the
same search whose card spans at most that target."""
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

import precision_cost  # noqa: E402

from recallbench.law import run_card  # noqa: E402
from recallbench.leaderboard import load_suite  # noqa: E402
from recallbench.leaderboard.capacity import method2  # noqa: E402

BOARD = ROOT / "leaderboards" / "cpu-v4"


def card_of(name: str, budget: str = "D32-N4"):
    sub = yaml.safe_load((BOARD / "submissions" / f"{name}.yaml").read_text())
    b = next(b for b in sub["budgets"] if b["name"] == budget)
    return load_suite(BOARD), b, precision_cost.budget_records(sub, b)


def test_at_the_stored_target_the_replay_is_the_submitted_card():
    suite, budget, records = card_of("linear-mamba")
    got = precision_cost.at_spread(suite, budget, records, method2.target(suite))
    card = budget["card"]
    assert got["status"] == card["status"] == "measured"
    assert got["runs"] == len(card["runs"]) == len(budget["points"])
    assert got["mtok"] == pytest.approx(card["work_mtok"], rel=1e-9)
    assert got["cpu_min"] == pytest.approx(card["cpu_s"] / 60, rel=1e-9)
    assert [got["lo"], got["hi"]] == pytest.approx(card["n50"]["ci"], rel=1e-6)


@pytest.mark.slow
def test_a_looser_target_stops_earlier_on_the_same_runs():
    suite, budget, records = card_of("deltanet")  # 14 runs at the board's 1.4
    stored = budget["card"]
    loose = precision_cost.at_spread(suite, budget, records, 2.0)
    assert loose["status"] == "measured"
    assert run_card.MIN_OBSERVED <= loose["runs"] < len(stored["runs"])
    assert loose["mtok"] < stored["work_mtok"] and loose["cpu_min"] < stored["cpu_s"] / 60
    # the runs it stops on are runs the stored search trained, none added
    assert set(loose["cells"]) < {(p["num_facts"], p["seed"]) for p in budget["points"]}
    assert method2.target(suite) < loose["hi"] / loose["lo"] <= 2.0


def test_a_target_tighter_than_the_stored_one_is_one_line_naming_it(capsys):
    with pytest.raises(SystemExit) as stop:
        precision_cost.main(["--suite", str(BOARD), "--spreads", "1.3",
                             str(BOARD / "submissions" / "designed.yaml")])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert "--spreads: each target must be in [1.4, 2]: at least the board's own" in \
        err.splitlines()[-1]
    assert "Traceback" not in err
