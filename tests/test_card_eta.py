"""A method-2 card's dry-run ETA (``card_eta.eta_seconds``): a range from the fewest runs
a measured card has to what a noisy layer needs, each end capped by the work budget left."""
import pytest

from recallbench.runs import card_eta

BASE = {"train": {"lr": [0.003, 0.01, 0.03], "lr_rung": 0.25, "max_steps": 2000,
                  "batch_size": 32}}


def test_the_range_counts_the_halving_s_steps_and_the_runs_left():
    lo, hi, cap = card_eta.eta_seconds(BASE, step_s=0.01, nf=8, work_left_mtok=1e6)
    per_run = 2000 * (2 * 0.25 + 1) * 0.01  # two candidates a quarter of the way, one in full
    assert lo == pytest.approx(card_eta.ETA_RUNS[0] * per_run)
    assert hi == pytest.approx(2 * card_eta.ETA_RUNS[1] * per_run)
    assert cap == pytest.approx(1e12 / (32 * 4 * 8) * 0.01)
    full = {"train": {**BASE["train"], "lr_rung": None}}  # every candidate in full
    assert card_eta.eta_seconds(full, 0.01, 8, work_left_mtok=1e6)[0] == pytest.approx(
        card_eta.ETA_RUNS[0] * 2000 * 3 * 0.01)
    done = card_eta.eta_seconds(BASE, 0.01, 8, runs_done=6, work_left_mtok=1e6)
    assert done[0] == pytest.approx(2 * per_run) and done[1] < hi
    assert card_eta.eta_seconds(BASE, 0.01, 8, runs_done=200, work_left_mtok=1e6)[:2] == (0, 0)


def test_the_work_budget_caps_both_ends():
    lo, hi, cap = card_eta.eta_seconds(BASE, step_s=0.01, nf=8, work_left_mtok=10)
    assert cap == pytest.approx(10e6 / (32 * 4 * 8) * 0.01) and lo == cap and hi == cap
    text = card_eta.eta_text(60.0, 600.0, 900.0, workers=2)
    assert "about 1.0 CPU-min (8 runs" in text and "to 10.0 (130 runs" in text
    assert "stops it by 15.0" in text and "wall time 0.5 to 5.0 min on 2 worker(s)" in text
