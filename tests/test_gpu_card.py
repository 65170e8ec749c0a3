"""benchmarks/gpu_card.py: its budget is bounded by one device call, its steps' shares cover
it, and its card is the one ``recallbench capacity`` makes."""
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import gpu_card  # noqa: E402


def test_a_budget_past_a_device_call_is_refused_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(BENCH / "gpu_card.py"), "--device", "cpu",
                        "--out", str(tmp_path / "o"), "--budget-s", "600"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "--budget-s 600 is not allowed: seconds in [10, 540]" in r.stderr
    assert "Traceback" not in r.stderr


def test_shares_cover_the_budget_and_the_card_is_the_capacity_commands():
    assert abs(sum(gpu_card.SHARES.values()) - 1.0) < 1e-9
    from recallbench.runs.capacity import TRAIN

    base = gpu_card.card_base("cpu", False, 32, 8, 512)
    assert base["model"]["d_model"] == 32 and base["model"]["d_state"] == 8
    assert base["train"]["lr"] == TRAIN["lr"]
    assert base["train"]["max_steps_limit"] == TRAIN["max_steps_limit"]
    assert 2 <= gpu_card.first_facts() <= 255


@pytest.mark.slow
def test_the_dry_run_measures_every_step(tmp_path):
    out = tmp_path / "o"
    r = subprocess.run([sys.executable, str(BENCH / "gpu_card.py"), "--device", "cpu",
                        "--quick", "--out", str(out), "--budget-s", "400"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    summary = json.loads((out / "summary.json").read_text())
    assert summary["packed_ratio"] > 0 and summary["card_finished"] is True
    assert summary["parity_rows"] == 2
