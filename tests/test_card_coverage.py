"""Synthetic cards (benchmarks/synthetic_cards.py) draw runs from the model they claim, and
the N50 card's 95% interval covers the true N50 on them (benchmarks/card_coverage.py)."""
import doctest
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

import card_coverage  # noqa: E402
import synthetic_cards as synth  # noqa: E402

#: the coverage the interval must not be credibly below
FLOOR = 0.92


def cfg(nf, seed=0):
    return card_coverage.config(nf, seed)


def runs(truth, nfs, seed=0):
    run_cell = synth.runner(truth, np.random.default_rng(seed))
    return run_cell([cfg(int(nf), i) for i, nf in enumerate(nfs)])


def share(rec):
    nf = rec["config"]["task"]["num_facts"]
    return (rec["accuracy"] - 1 / nf) / (1 - 1 / nf)


@pytest.fixture(scope="module")
def pool():
    """Two processes with one BLAS thread each (in this process, L-BFGS-B under a
    multi-threaded OpenBLAS costs up to 20x the CPU on a busy machine)."""
    p = card_coverage.make_pool(2)
    yield p
    p.terminate()


def least_count(n, p=FLOOR, alpha=0.01):
    """The count of n cards covered below which a coverage of ``p`` is rejected at
    ``alpha``: the binomial's alpha-quantile."""
    return int(stats.binom.ppf(alpha, n, p))


def test_the_module_example_holds():
    res = doctest.testmod(synth)
    assert res.attempted >= 5 and res.failed == 0


def test_runs_at_n50_recall_half_the_queries_above_the_guess():
    """tau = 0, no failures: every run at N_f = N50 has q = 1/2, so its accuracy has mean
    g + (1 − g)/2; the mean over R runs is within 4 SE of it, the SE that of the
    beta-binomial test (sequences of N_f correlated queries)."""
    nf, n_runs = 16, 60
    recs = runs(synth.Truth(n50=16.0, slope=1.3, tau=0.0, failure_rate=0.0), [nf] * n_runs)
    p = 1 / nf + (1 - 1 / nf) / 2
    c = synth.CONCENTRATION
    per_sequence = p * (1 - p) * (1 / (c + 1) + c / ((c + 1) * nf))
    se = math.sqrt(per_sequence / synth.TEST_SIZE / n_runs)
    acc = np.array([r["accuracy"] for r in recs])
    assert abs(acc.mean() - p) < 4 * se
    # and a run's own scatter is that of its test, nothing more
    assert acc.std(ddof=1) < 1.5 * math.sqrt(per_sequence / synth.TEST_SIZE)


def test_failures_stay_at_the_guess_at_their_rate():
    """failure_rate 0.5 at an N_f the learned runs recall almost fully: about half the runs
    (within 4 binomial SDs) are at the guess level, the rest far above it."""
    n_runs, nf = 200, 8
    recs = runs(synth.Truth(n50=60.0, slope=1.5, tau=0.0, failure_rate=0.5), [nf] * n_runs)
    at_guess = sum(r["accuracy"] < 1 / nf + 0.05 for r in recs)
    assert abs(at_guess - n_runs / 2) < 4 * math.sqrt(n_runs / 4)
    assert all(r["accuracy"] > 0.9 for r in recs if r["accuracy"] >= 1 / nf + 0.05)


@pytest.mark.parametrize("tau", [0.0, 0.4])
def test_the_probit_of_q_falls_with_ln_nf_at_the_slope(tau):
    """Φ⁻¹(q̂) regressed on ln N_f over runs spanning q 0.1-0.9: the slope is the truth's
    within 4 SE of least squares, the SE from the residual noise (tau and the test) and
    the runs' spread in ln N_f; the line crosses 0 at ln N50 within 4 SE too."""
    truth = synth.Truth(n50=20.0, slope=1.4, tau=tau, failure_rate=0.0)
    nfs = np.repeat(np.round(20 * np.exp(np.linspace(-0.9, 0.9, 10))), 8)
    recs = runs(truth, nfs, seed=1)
    x = np.log([r["config"]["task"]["num_facts"] for r in recs])
    z = special.ndtri(np.array([share(r) for r in recs]))
    b, a = np.polyfit(x, z, 1)
    resid = z - (a + b * x)
    s = math.sqrt(np.sum(resid ** 2) / (len(x) - 2))
    sxx = np.sum((x - x.mean()) ** 2)
    assert abs(-b - truth.slope) < 4 * s / math.sqrt(sxx)
    se_x0 = s / abs(b) * math.sqrt(1 / len(x) + (math.log(20) - x.mean()) ** 2 / sxx)
    assert abs(-a / b - math.log(20)) < 4 * se_x0
    if tau:  # the scatter is the truth's (the test's own is ~0.01 on this scale)
        assert 0.7 * tau < s < 1.3 * tau
    else:
        assert s < 0.05


def test_records_carry_the_search_and_its_work():
    """Three candidates a run, 2,000 steps each unless the chosen one was extended; a run
    at q >= 0.999 stops early; the work is Σ steps × batch × seq_len."""
    truth = synth.Truth(n50=40.0, slope=1.5, tau=0.0, failure_rate=0.0)
    run_cell = synth.runner(truth, np.random.default_rng(2))
    mid, easy = run_cell([cfg(40, 0)]), run_cell([cfg(2, 0)])
    for rec in mid + easy:
        assert [c["lr"] for c in rec["lr_search"]] == list(synth.LRS)
        assert rec["lr"] in synth.LRS and rec["status"] == "ok" and rec["converged"]
        assert all(set(c) == {"lr", "val_accuracy", "steps", "converged", "error"}
                   for c in rec["lr_search"])
        assert max(c["val_accuracy"] for c in rec["lr_search"]) == rec["val_accuracy"]
        nf = rec["config"]["task"]["num_facts"]
        steps = sum(c["steps"] for c in rec["lr_search"])
        assert synth.work_tokens(rec) == steps * synth.BATCH_SIZE * 4 * nf
    assert all(c["steps"] >= synth.MAX_STEPS for c in mid[0]["lr_search"])
    assert mid[0]["stop_reason"] == "plateau"
    assert easy[0]["stop_reason"] == "early_stop" and easy[0]["accuracy"] > 0.99
    assert all(c["steps"] < synth.MAX_STEPS for c in easy[0]["lr_search"])
    assert run_cell.runs == 2 and run_cell.calls == [[40], [2]]
    assert run_cell.work_mtok == pytest.approx(
        sum(synth.work_tokens(r) for r in mid + easy) / 1e6)


def test_sample_truth_stays_in_the_ranges():
    rng = np.random.default_rng(0)
    truths = [synth.sample_truth(rng) for _ in range(300)]
    for key, (lo, hi) in synth.RANGES.items():
        vals = [getattr(t, key) for t in truths]
        assert lo <= min(vals) and max(vals) <= hi
    # n50 log-uniform: ln n50 uniform over [ln 5, ln 60]
    logs = np.log([t.n50 for t in truths])
    assert stats.kstest((logs - math.log(5)) / math.log(12), "uniform").pvalue > 0.001


def test_the_fit_covers_the_true_n50_on_a_fixed_design(pool):
    """40 cards, 4 cells x 2 runs around each true N50, runfit alone: the count covered is
    not below the 1% quantile of a binomial at 0.92."""
    rows = card_coverage.run_cards(40, seed=0, fit_only=True, pool=pool)
    covered = sum(r["covered"] for r in rows)
    assert covered >= least_count(40), covered
    assert all(r["runs"] == 8 for r in rows)


def test_the_script_prints_the_table():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "card_coverage.py"),
                           "--cards", "3", "--fit-only"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "3 synthetic cards" in out and "CPU per card" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("all "))
    assert row.split()[1] == "3" and "±" in row
    for key in ("slope [1, 1.3)", "tau [0.467, 0.7]", "failure_rate [0.067, 0.1]"):
        assert key in out


def test_one_truth_for_every_card_and_the_batch_limit_are_kept():
    """--truth puts one truth in every card; --max-batches stops the search there (a noisy,
    shallow layer: runs to the limit), and the rows say so."""
    truth = (8.6, 0.72, 0.6, 0.04)
    rows = card_coverage.run_cards(2, seed=3, truth=truth, max_batches=3)
    for r in rows:
        t = r["truth"]
        assert (t["n50"], t["slope"], t["tau"], t["failure_rate"]) == truth
        assert r["runs"] <= 2 * 3
    assert any(r["stopped"] == "3 batches" and r["runs"] == 6 for r in rows)


def test_the_search_covers_the_true_n50_on_a_few_cards(pool):
    """5 cards through the search (about 2 CPU-s each): a check of the whole path more
    than of the coverage, which the slow test below measures."""
    rows = card_coverage.run_cards(5, seed=0, pool=pool)
    covered = sum(r["covered"] for r in rows)
    assert covered >= least_count(5), covered
    assert all(r["work_mtok"] == pytest.approx(r["runner_mtok"]) for r in rows)
    assert all(r["status"] in ("measured", "bound", "no recall") for r in rows)


@pytest.mark.slow
def test_the_search_covers_the_true_n50_on_500_cards(pool):
    """500 cards through the search: coverage at least 0.92 over all cards and over those
    called measured."""
    rows = card_coverage.run_cards(500, seed=0, pool=pool)
    overall = card_coverage.summary(rows)
    assert overall["all"][0] >= FLOOR, card_coverage.table(rows)
    assert overall["measured"][0] >= FLOOR, card_coverage.table(rows)


@pytest.mark.parametrize("shared", [True, False])
def test_a_seed_s_effect_is_shared_by_its_runs_across_cells_only_when_asked(shared):
    """tau = 0, seed SD 0.5: 120 card seeds, each run at N_f = 12 and 20 (the run seeds the
    search gives them, s + 100000·N_f).  Their probit residuals from the truth's line have
    SD 0.5 (within 20%) and, when the seed's effect is keyed by s + 1000·j (``shared``),
    correlate across the two cells above 0.8 (the test noise alone separates them); with
    each run its own seed, the correlation is within 3 SE of 0."""
    from recallbench.runs.card_search import run_seed

    truth = synth.Truth(n50=16.0, slope=1.3, tau=0.0, failure_rate=0.0, seed_sd=0.5)
    run_cell = synth.runner(truth, np.random.default_rng(3), shared=shared)
    n = 120
    recs = run_cell([cfg(nf, run_seed(s, nf, 0)) for s in range(n) for nf in (12, 20)])
    z = np.array([special.ndtri(share(r)) for r in recs]).reshape(n, 2)
    res = z - truth.slope * (math.log(truth.n50) - np.log([12.0, 20.0]))
    assert res.std(ddof=1) == pytest.approx(0.5, rel=0.2)
    r = np.corrcoef(res[:, 0], res[:, 1])[0, 1]
    assert (r > 0.8) if shared else (abs(r) < 3 / math.sqrt(n)), r


def test_the_seed_analysis_finds_a_shared_seed_s_effect_and_nothing_to_test_without_one():
    """benchmarks/seed_effects.py on synthetic cards of 30 card seeds at 3 cells each (tau
    0.3): with the seed's effect (SD 0.3) shared across cells, F's p is below 0.001 and the
    estimated share of the seed lies within 0.25 of the truth's 0.5; under run seeds with
    N_f in them no seed has runs at two cells."""
    import seed_effects
    from recallbench.law import run_card
    from recallbench.runs.card_search import run_seed

    truth = synth.Truth(n50=16.0, slope=1.3, tau=0.3, failure_rate=0.0, seed_sd=0.3)
    for shared in (True, False):
        run_cell = synth.runner(truth, np.random.default_rng(5), shared=shared)
        recs = run_cell([cfg(nf, (s if shared else run_seed(s, nf, 0)))
                         for s in range(30) for nf in (12, 16, 21)])
        gs = seed_effects.groups(run_card.build_run_card(recs))
        if not shared:
            assert gs == []
            continue
        ssb, ssw, dfb, dfw = seed_effects.anova(gs)
        f = (ssb / dfb) / (ssw / dfw)
        assert (dfb, dfw) == (29, 60) and stats.f.sf(f, dfb, dfw) < 1e-3
        n0 = 3
        assert (f - 1) / (f - 1 + n0) == pytest.approx(0.5, abs=0.25)


def test_progress_says_what_is_left_at_the_rate_so_far(capsys, monkeypatch):
    clock = iter([100.0, 100.0, 130.0, 131.0, 190.0])
    monkeypatch.setattr(card_coverage.time, "time", lambda: next(clock))
    p = card_coverage.Progress(every=30.0)
    p(1, 4)  # 30 s for one card: three more take about 90 s
    p(2, 4)  # 1 s after the last line: quiet
    p(4, 4)  # the end is always said
    err = capsys.readouterr().err.splitlines()
    assert err == ["1/4 cards, 30 s, about 90 s left", "4/4 cards, 90 s"]
