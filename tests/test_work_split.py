"""benchmarks/work_split.py: a board's work split from its submissions' runs, which must add
up to what ``leaderboard render`` states from the cards (a separate path: the card's work
from each run's record)."""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

import work_split  # noqa: E402

BOARD = ROOT / "leaderboards" / "cpu-v4"


def test_the_split_adds_up_to_the_boards_stated_work_and_cpu():
    m = re.search(r"In all: (\d+) cards, ([\d,]+) Mtok of training and ([\d.]+) CPU-hours",
                  (BOARD / "README.md").read_text())
    assert m, "the board's README states its work in all"
    rows = [s for path in sorted((BOARD / "submissions").glob("*.yaml"))
            for _, s in work_split.cards(str(path))]
    assert len(rows) == int(m.group(1))
    assert sum(s["mtok"] for s in rows) == pytest.approx(float(m.group(2).replace(",", "")),
                                                         abs=0.5)
    assert sum(s["cpu_min"] for s in rows) / 60 == pytest.approx(float(m.group(3)), abs=0.05)
    for s in rows:
        assert 0 <= s["dropped"] + s["extended"] <= s["mtok"] + 1e-9
        assert sum(s["lr"].values()) == s["runs"]


def test_a_run_splits_into_its_dropped_candidates_and_its_extension():
    train = {"batch_size": 32, "max_steps": 2000}
    run = {"num_facts": 5, "lr": 0.01, "steps": 4000, "cpu_s": 60.0,
           "lr_search": [{"lr": 0.003, "steps": 500}, {"lr": 0.01, "steps": 4000},
                         {"lr": 0.03, "steps": 250}]}
    s = work_split.split([run], train)
    per_step = 32 * 20 / 1e6
    assert s["mtok"] == pytest.approx(4750 * per_step)
    assert s["dropped"] == pytest.approx(750 * per_step)
    assert s["extended"] == pytest.approx(2000 * per_step)
    assert s["cpu_min"] == 1.0 and s["lr"] == {0.01: 1}
