"""benchmarks/board_cost.py: boards' submitted runs priced on this machine.  The runs it
rebuilds must carry the work and CPU time their stored cards state (the submission is the
independent reference); a run's price grows with its steps over every learning-rate
candidate; the script prints both boards, their common models and the ratio, and refuses a
bad flag in one line."""
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

import board_cost  # noqa: E402

from recallbench.law import run_card  # noqa: E402

V3, V4 = ROOT / "leaderboards" / "cpu-v3", ROOT / "leaderboards" / "cpu-v4"


def test_the_rebuilt_runs_carry_the_cards_work_and_cpu_time():
    runs = board_cost.board_runs(V4)
    assert "deltanet-key-32" not in runs and "linear-attention-key-32" not in runs  # shapes
    assert {"mamba", "mamba2", "attention", "linear-mamba"} <= set(runs)
    sub = yaml.safe_load((V4 / "submissions" / "mamba2.yaml").read_text())
    cards = [b["card"] for b in sub["budgets"]]
    recs = runs["mamba2"]
    assert len(recs) == sum(len(b["points"]) for b in sub["budgets"])
    assert sum(run_card.work_tokens(r) for r in recs) / 1e6 == pytest.approx(
        sum(c["work_mtok"] for c in cards), rel=1e-9)
    assert sum(float(r["cpu_s"]) for r in recs) == pytest.approx(
        sum(c["cpu_s"] for c in cards), rel=1e-9)
    # every learning-rate candidate's steps count: more than the chosen run's alone
    assert sum(board_cost.run_steps(r) for r in recs) > sum(int(r["steps"]) for r in recs)


def test_a_run_s_price_grows_with_its_steps_and_validations():
    rec = {"config": {"train": {"val_every": 50, "val_size": 512, "test_size": 1024}},
           "lr_search": [{"steps": 500}, {"steps": 500}, {"steps": 2000}]}
    assert board_cost.run_steps(rec) == 3000
    assert board_cost.run_price(rec, 0.01, 0.0) == pytest.approx(30.0)
    longer = {**rec, "lr_search": rec["lr_search"] + [{"steps": 3000}]}
    assert board_cost.run_price(longer, 0.01, 0.0) == pytest.approx(60.0)
    # validations: one per val_every steps of each candidate, and the test set (2 sets)
    assert board_cost.run_price(rec, 0.0, 1.0) == pytest.approx(60 + 2)


@pytest.mark.slow
def test_the_script_prices_both_boards_and_their_ratio(capsys):
    assert board_cost.main([str(V3), str(V4), "--only", "linear-mamba", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "\ncpu-v3\n" in out and "\ncpu-v4\n" in out
    assert "cpu-v4 / cpu-v3 over the 1 common models, priced here:" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("linear-mamba")]
    assert len(rows) == 2 and all(float(r[3]) > 0 for r in rows)


def test_a_bad_step_count_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        board_cost.main([str(V4), "--steps", "0"])
    assert e.value.code == 2
    assert "--steps: 0 is not allowed: give at least 1" in capsys.readouterr().err
