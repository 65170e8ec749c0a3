"""The extended law (a guessing floor) and its likelihood-ratio test, on simulated counts.

Counts are drawn from a floored law with a known floor, and from the paper's law with no
floor; the calibration of the test is checked by simulation (its rejection rate over many
datasets drawn under the paper's law), not against a formula.
"""
import json

import numpy as np
import pytest
from scipy import special

from recallbench.law import extended, fit

V, N_F, A, B, QUERIES = 512, 16, 1.25, 2.9, 2048
GRID = [(d, n) for d in (4, 8, 16, 32, 64) for n in (2, 4, 8, 16, 32) if n <= d]
D = np.array([d for d, _ in GRID], float)
N = np.array([n for _, n in GRID], float)


def law(floor=0.0, a=A, b=B):
    """Recall of every grid cell under p = f + (1 − f)·Φ(x − b), drawn independently of
    the module: x = 1/σ from theory (eq. 19's σ), Φ from scipy."""
    from recallbench.law import theory

    x = theory.inverse_sigma(N_F, D, N, a, 1)
    return floor + (1 - floor) * special.ndtr(np.asarray(x) - b)


def draw(rng, p, dispersion=1.0, total=QUERIES):
    """Binomial counts, or beta-binomial ones whose variance is ``dispersion`` times the
    binomial variance (intra-class correlation ρ = (φ − 1)/(n − 1))."""
    if dispersion == 1.0:
        return rng.binomial(total, p)
    rho = (dispersion - 1) / (total - 1)
    s = (1 - rho) / rho
    return rng.binomial(total, rng.beta(p * s, (1 - p) * s))


def counts(k):
    return (k, np.full(len(k), float(QUERIES)), D, N, N_F, V)


def rejection_rate(seed, dispersion, n_sets, alpha=0.05):
    rng = np.random.default_rng(seed)
    p = law()
    tests = [extended.floor_test(*counts(draw(rng, p, dispersion))) for _ in range(n_sets)]
    return np.mean([t["p_value"] < alpha for t in tests]), tests


def test_a_known_floor_is_recovered_and_the_paper_law_rejected():
    floor = 1 / N_F  # a bag of values: a failed read-out still names one of the N_f values
    k = draw(np.random.default_rng(1), law(floor))
    res = extended.fit_extended(*counts(k))
    ext, test = res["extended"], res["test"]
    assert ext["floor_ci"][0] <= floor <= ext["floor_ci"][1]
    assert ext["floor_ci"][1] - ext["floor_ci"][0] < 0.02
    assert ext["a_ci"][0] <= A <= ext["a_ci"][1] and ext["b_ci"][0] <= B <= ext["b_ci"][1]
    assert test["p_value"] < 1e-6 and test["lr"] > 100
    assert ext["aic"] < res["paper"]["aic"] - 100 and ext["qaic"] < res["paper"]["qaic"]
    # the paper's law misfits (a dispersion the floored law does not need), most where
    # the floor lifts the accuracy above it: the small cells
    assert res["paper"]["dispersion"] > 10 * ext["dispersion"]
    worst = res["paper"]["worst"][0]
    assert worst["d_model"] * worst["d_state"] <= 64 and worst["residual"] > 0
    assert res["note"] == "extension, not the paper's law"


def test_an_overdispersed_floor_is_still_found_by_the_f_test():
    k = draw(np.random.default_rng(2), law(0.05), dispersion=30.0)
    res = extended.fit_extended(*counts(k))
    assert res["test"]["kind"] == "F" and res["test"]["df"] == [1, len(GRID) - 3]
    assert 10 < res["test"]["dispersion"] < 90
    assert res["test"]["p_value"] < 0.01
    assert res["extended"]["floor_ci"][0] <= 0.05 <= res["extended"]["floor_ci"][1]


def test_the_paper_law_part_matches_the_collapse_fit():
    # two implementations of the same maximum likelihood: fit.fit_collapse's profile
    # search and this module's SLSQP; they must find the same optimum
    k = draw(np.random.default_rng(3), law())
    res = extended.fit_extended(*counts(k))
    col = fit.fit_collapse(*counts(k), model_kind=None)
    assert res["paper"]["nll"] == pytest.approx(col.nll, abs=1e-6)
    assert res["paper"]["a"] == pytest.approx(col.a) and res["paper"]["b"] == pytest.approx(col.b)
    assert res["extended"]["nll"] <= res["paper"]["nll"] + 1e-9
    assert res["test"]["lr"] >= 0.0
    json.dumps(res, allow_nan=False)  # strict JSON: unbounded CI ends are null


def test_false_rejections_under_the_paper_law_are_nominal():
    # 200 binomial datasets drawn without a floor: at 5 % the test should reject about 10
    # of them (the binomial 95 % range for 200 draws at 5 % is 4 to 17), at 10 % about 20
    rate, tests = rejection_rate(seed=10, dispersion=1.0, n_sets=200)
    assert all(t["kind"] == "F" for t in tests)
    assert 0.02 <= rate <= 0.085
    assert 0.05 <= np.mean([t["p_value"] < 0.10 for t in tests]) <= 0.15
    # f = 0 is the edge of the range: a good share of the fits stay on it (p = 1)
    assert 0.2 <= np.mean([t["p_value"] == 1.0 for t in tests]) <= 0.7


@pytest.mark.slow
def test_false_rejections_of_the_f_test_are_nominal_when_overdispersed():
    rate, tests = rejection_rate(seed=11, dispersion=30.0, n_sets=200)
    assert all(t["kind"] == "F" for t in tests)
    assert 0.02 <= rate <= 0.085


@pytest.mark.slow
def test_the_floor_interval_covers_the_floor_at_about_its_level():
    rng = np.random.default_rng(12)
    hits = [extended.fit_extended(*counts(draw(rng, law(0.03))))["extended"]["floor_ci"]
            for _ in range(40)]
    coverage = np.mean([lo <= 0.03 <= hi for lo, hi in hits])
    assert coverage >= 0.85  # nominal 95 %; 40 draws put 0.87 two standard errors below


def test_too_few_configurations_is_one_clear_error():
    with pytest.raises(ValueError, match="3 or more distinct"):
        extended.floor_test([10, 20], [100, 100], [8, 16], [2, 2], N_F, V)
    with pytest.raises(ValueError, match="one vocab_size"):
        extended.floor_test([10, 20, 30], [100] * 3, [8, 16, 32], [2] * 3, N_F, [512, 512, 256])


def test_lr_test_halves_the_tail_at_the_boundary():
    # the statistic is 0 at the boundary (p = 1); above it, half the F(1, dof) tail with
    # the estimated dispersion, or half the χ²₁ tail without over-dispersion
    assert extended.lr_test(10.0, 10.0, 10.0, 10)["p_value"] == 1.0
    f = extended.lr_test(12.0, 10.0, 40.0, 10)
    assert f["kind"] == "F" and f["dispersion"] == 4.0 and f["statistic"] == 1.0
    assert f["p_value"] == pytest.approx(0.5 * 0.3409, rel=1e-3)  # P(|t₁₀| > 1) = 0.3409
    below_one = extended.lr_test(12.0, 10.0, 5.0, 10)  # φ̂ = 0.5 is not clamped at 1
    assert below_one["statistic"] == 8.0 and below_one["p_value"] < f["p_value"]
    chi = extended.lr_test(12.0, 10.0, 40.0, 10, overdispersion=False)
    assert chi["kind"] == "chi2" and chi["p_value"] == pytest.approx(0.5 * 0.0455, rel=1e-2)


def record(d, n, p, rng, **extra):
    cfg = {"task": {"name": "mqar", "vocab_size": V, "seq_len": 64, "num_facts": N_F,
                    "power_a": 1.0, "random_non_queries": True},
           "model": {"adapter": "linear-mamba", "d_model": d, "d_state": n, "n_layers": 1,
                     "d_conv": 2, "n_heads": 1, "head_pattern": None, "expand": 2, "options": {}},
           "train": {"seed": 0, "max_steps": 800, "lr": 0.01}}
    k = int(rng.binomial(QUERIES, p))
    return {"schema": "recallbench.result/1", "status": "ok", "error": None, "seed": 0,
            "accuracy": k / QUERIES, "correct": k, "total": QUERIES, "state_size": 2 * d * n,
            "state_bits": 32, "info_bits": N_F * 8.0, "config": cfg,
            "config_hash": f"h-{d}-{n}", **extra}


def test_score_reports_the_extension_beside_the_paper_law(cli, tmp_path):
    rng = np.random.default_rng(4)
    recs = [record(int(d), int(n), p, rng) for d, n, p in zip(D, N, law(1 / N_F))][::2]
    # an unconverged cell (cut by max_steps while improving) stays out of this fit too
    recs[-1].update(converged=False, stop_reason="max_steps")
    (tmp_path / "runs.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    rc, _, err = cli("score", "runs.jsonl", "--out", "rep", "--no-figures")
    assert rc == 0, err
    group = json.loads((tmp_path / "rep" / "report.json").read_text())["groups"][0]
    ext = group["extended"]["best"]
    assert ext["note"] == "extension, not the paper's law"
    assert ext["n_points"] == len(recs) - 1 == group["collapse"]["best"]["n_points"]
    assert ext["paper"]["a"] == group["collapse"]["best"]["a"]
    assert ext["test"]["p_value"] < 1e-3
    assert ext["extended"]["floor_ci"][0] <= 1 / N_F <= ext["extended"]["floor_ci"][1]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "**Extended law (extension, not the paper's law)**" in md
    row = next(line for line in md.splitlines() if line.startswith("| best of seeds | extended"))
    assert f"F(1, {len(recs) - 4}) = " in row and "AIC" in row and "D=" in row.split("|")[-2]
