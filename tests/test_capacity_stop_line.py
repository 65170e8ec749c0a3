"""``recallbench capacity`` (method 2) says why the search stopped when its card is a bound,
and not when it is measured; the search's training is replaced by simulated runs."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import synthetic_cards as synth  # noqa: E402

from recallbench.runs import card_search  # noqa: E402
from test_futility import NOISY, QUIET  # noqa: E402


@pytest.mark.parametrize("truth, budget, said", [
    (NOISY, "60", "the search stopped: no N_f with q in [0.1, 0.9] fits the work budget left"),
    (QUIET, "1000", None)])
def test_a_bound_says_why_the_search_stopped(cli, tmp_path, monkeypatch, truth, budget, said):
    real = card_search.measure

    def run(base, *, seeds, store, workers, say=print, executor=None, **kw):
        cell = synth.runner(truth, np.random.default_rng(2))
        kw = {k: v for k, v in kw.items() if k != "time_limit_s"}
        return real(base, seeds=seeds, run_cell=cell, say=say, **kw)

    monkeypatch.setattr(card_search, "run", run)
    rc, out, err = cli("capacity", "--adapter", "linear-mamba", "--d-model", "32",
                       "--d-state", "8", "--work-budget", budget, "--max-cells", "96",
                       "--out", "card")
    assert rc == 0, err
    if said:
        assert "BOUND" in out and said in out
    else:
        assert "the search stopped" not in out and "BOUND" not in out
