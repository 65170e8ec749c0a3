"""Maximum-likelihood fits (recallbench.law.fit) on counts simulated from the law."""
import math

import numpy as np
import pytest
from scipy import special, stats

from recallbench.law import fit
from recallbench.law import theory

QUERIES = 2048 * 16  # 2048 test sequences × 16 queries
V = 512
NUM_FACTS = 32


def dn_grid():
    d, n = np.meshgrid([8, 16, 32, 64, 128], [2, 4, 8, 16, 32], indexing="ij")
    d, n = d.ravel(), n.ravel()
    keep = n <= d  # the paper skips N > D
    return d[keep], n[keep]


def test_collapse_fit_recovers_a_and_covers_it():
    rng = np.random.default_rng(2026)
    d, n = dn_grid()
    a_true, b_true = 1.25, math.sqrt(2 * math.log(V))
    x = np.sqrt(n * d / (a_true * NUM_FACTS + n))  # the law, written out
    p = special.ndtr(x - b_true)
    reps, covered_a, covered_b = 100, 0, 0
    for _ in range(reps):
        k = rng.binomial(QUERIES, p)
        f = fit.fit_collapse(k, QUERIES, d, n, NUM_FACTS, V, family="mqar", model_kind="linear")
        assert abs(f.a / a_true - 1) < 0.10
        assert f.a_ci[0] < f.a < f.a_ci[1] and f.b_ci[0] < f.b < f.b_ci[1]
        covered_a += f.a_ci[0] <= a_true <= f.a_ci[1]
        covered_b += f.b_ci[0] <= b_true <= f.b_ci[1]
    assert covered_a >= 90 and covered_b >= 90, (covered_a, covered_b)
    assert f.paper_a == 1.25 and f.paper_b == pytest.approx(b_true)


def test_collapse_fit_layers_use_lambda_n():
    rng = np.random.default_rng(3)
    d, n = dn_grid()
    lam = np.where(np.arange(len(d)) % 2, 2, 1)
    a_true, b_true = 0.8, 3.0
    p = special.ndtr(np.sqrt(lam * n * d / (a_true * NUM_FACTS + lam * n)) - b_true)
    k = rng.binomial(QUERIES, p)
    f = fit.fit_collapse(k, QUERIES, d, n, NUM_FACTS, V, n_layers=lam, model_kind=None)
    assert abs(f.a / a_true - 1) < 0.1 and f.paper_a is None
    wrong = fit.fit_collapse(k, QUERIES, d, n, NUM_FACTS, V, n_layers=1)
    assert wrong.nll > f.nll + 10  # ignoring Λ fits worse


def test_overdispersion_widens_the_interval():
    rng = np.random.default_rng(5)
    d, n = dn_grid()
    p = special.ndtr(np.sqrt(n * d / (1.25 * NUM_FACTS + n)) - 3.5)
    p_noisy = np.clip(p * rng.normal(1.0, 0.08, size=p.shape), 0, 1)  # seed-to-seed spread
    k = rng.binomial(QUERIES, p_noisy)
    quasi = fit.fit_collapse(k, QUERIES, d, n, NUM_FACTS, V)
    plain = fit.fit_collapse(k, QUERIES, d, n, NUM_FACTS, V, overdispersion=False)
    assert quasi.dispersion > 2 and plain.dispersion == 1.0
    assert quasi.a_ci[1] - quasi.a_ci[0] > 1.3 * (plain.a_ci[1] - plain.a_ci[0])


def test_effective_state_recovers_n_eff_and_covers_it():
    rng = np.random.default_rng(11)
    num_facts = np.array([4, 8, 16, 32, 64, 128])
    d_model, n_eff, a = 64, 12.0, 1.25
    p = theory.recall_from_inverse_sigma(np.sqrt(n_eff * d_model / (a * num_facts + n_eff)), V)
    reps, covered = 100, 0
    for _ in range(reps):
        k = rng.binomial(QUERIES, p)
        f = fit.fit_effective_state(k, QUERIES, d_model, num_facts, V, family="mqar")
        assert abs(f.theta / n_eff - 1) < 0.10
        covered += f.theta_ci[0] <= n_eff <= f.theta_ci[1]
    assert covered >= 90, covered
    s_eff, s_ci = f.state(d_model)
    assert s_eff == pytest.approx(2 * d_model * f.theta)
    assert s_ci[0] < s_eff < s_ci[1]


def test_effective_state_pooled_efficiency():
    # a black box with states S_i that behaves like a linear reference with half of them
    rng = np.random.default_rng(12)
    d, n = dn_grid()
    state = 4 * d * n  # say, expand 4
    n_eff = 0.5 * state / (2 * d)
    p = theory.recall_probability(V, NUM_FACTS, d, n_eff, 1.25)
    k = rng.binomial(QUERIES, p)
    f = fit.fit_effective_state(k, QUERIES, d, NUM_FACTS, V, scale=state / (2 * d))
    assert f.theta == pytest.approx(0.5, rel=0.05)
    assert f.theta_ci[0] <= 0.5 <= f.theta_ci[1] or abs(f.theta - 0.5) < 0.01


def test_effective_state_at_the_ends():
    perfect = fit.fit_effective_state(QUERIES, QUERIES, 64, 16, V)
    assert math.isinf(perfect.theta) and math.isinf(perfect.theta_ci[1])
    lo = perfect.theta_ci[0]
    assert 0 < lo < math.inf
    # at the lower bound the likelihood p^n of all-right is e^{-χ²₁/2} below its supremum,
    # which is reached as N_eff → ∞, where σ² → 1/D (1/σ → √D)
    p_lo = theory.recall_probability(V, 16, 64, lo, 1.25)
    p_sup = theory.recall_from_inverse_sigma(math.sqrt(64), V)
    assert QUERIES * (math.log(p_sup) - math.log(p_lo)) == pytest.approx(
        stats.chi2.ppf(0.95, 1) / 2, rel=1e-4)
    chance = fit.fit_effective_state(0, QUERIES, 64, 16, V)
    assert chance.theta == 0.0 and chance.theta_ci[0] == 0.0


def test_binomial_interval_is_clopper_pearson():
    for k, n in [(0, 50), (3, 50), (25, 50), (50, 50), (16370, 16384)]:
        lo, hi = fit.binomial_interval(k, n)
        ref = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
        assert (lo, hi) == pytest.approx((ref.low, ref.high), abs=1e-9)


def test_fano_check_flags_impossible():
    # 16 facts over V_v = 64 values: 96 bits; a state of 2 float32 scalars holds 64 bits
    bad = fit.fano_check(16384, 16384, state_size=2, state_bits=32, info_bits=16 * math.log2(64))
    assert bad.impossible and bad.implied_bits > bad.state_bits_total
    ok = fit.fano_check(16384, 16384, state_size=4, state_bits=32, info_bits=96.0)
    assert not ok.impossible
    # chance-level accuracy never trips it
    assert not fit.fano_check(300, 16384, state_size=1, state_bits=16, info_bits=96.0).impossible


def test_capacity_report():
    d, n_eff = 64, 16.0
    rep = fit.capacity_report(d, n_eff, V, "mqar", state_size=2 * d * 16, state_bits=16, delta=0.01)
    assert theory.recall_probability(V, rep.capacity, d, n_eff, 1.25) == pytest.approx(0.99, abs=1e-6)
    assert rep.fano_min_bits == pytest.approx(theory.fano_min_bits(rep.capacity, V, 0.01))
    assert rep.state_bits_total == 16 * 2 * d * 16
    assert rep.bits_ratio == pytest.approx(rep.state_bits_total / rep.fano_min_bits)
    none = fit.capacity_report(d, n_eff, V, "mqar", state_size=None)
    assert none.bits_ratio is None and none.state_bits_total is None


def test_collapse_fit_needs_one_vocabulary():
    with pytest.raises(ValueError):
        fit.fit_collapse([1, 2], [10, 10], [8, 8], [2, 4], 16, [128, 256])


def test_collapse_fit_refuses_points_that_share_one_x():
    # the four published layer points: Λ·N = 12 at one D and N_f, so x(a) is the same for all
    with pytest.raises(ValueError, match=r"distinct \(Λ·N, D, N_f\).*not identified"):
        fit.fit_collapse([410, 377, 382, 376], [1000] * 4, 64, [12, 6, 4, 3], 80, 512,
                         n_layers=[1, 2, 3, 4])
    two = fit.fit_collapse([410, 600], [1000, 1000], 64, [12, 24], 80, 512)  # two x: a fit
    assert two.a > 0
