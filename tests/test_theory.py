"""The recall law (recallbench.law.theory) against simulation, quadrature, limits and
published numbers (docs/theory.md)."""
import math

import numpy as np
import pytest
from scipy import special, stats

from recallbench.law import theory


def simulate_gaussian_model(vocab_size, sig, trials, rng, top_k=1):
    """Monte Carlo of Thm 4.2's model: right read-out N(1, σ²), V − 1 wrong ones N(0, σ²)."""
    right = 1.0 + sig * rng.standard_normal(trials)
    if vocab_size <= 4096:
        wrong = sig * rng.standard_normal((trials, vocab_size - 1))
        beaten_by = (wrong > right[:, None]).sum(axis=1)
        return float(np.mean(beaten_by < top_k))
    # huge V, top-1: the largest of V − 1 standard normals by inverting its CDF Φ(m)^(V−1)
    assert top_k == 1
    u = rng.random(trials)
    largest = -special.ndtri(-np.expm1(np.log(u) / (vocab_size - 1)))
    return float(np.mean(right > sig * largest))


@pytest.mark.parametrize("vocab_size,sig", [(16, 0.5), (128, 0.3), (1024, 0.25), (1024, 1.0),
                                            (4096, 0.2), (10**6, 0.18)])
def test_eq19_matches_monte_carlo(vocab_size, sig):
    rng = np.random.default_rng(vocab_size + int(100 * sig))
    trials = 4000 if vocab_size <= 4096 else 200_000
    mc = simulate_gaussian_model(vocab_size, sig, trials, rng)
    p = theory.recall_from_sigma(sig, vocab_size)
    se = math.sqrt(max(p * (1 - p), 1e-4) / trials)
    assert abs(mc - p) < 4.5 * se, (mc, p)


@pytest.mark.parametrize("vocab_size", [2, 128, 10**6])
def test_limits(vocab_size):
    assert theory.recall_from_sigma(1e-3, vocab_size) == pytest.approx(1.0, abs=1e-12)
    assert theory.recall_from_sigma(0.0, vocab_size) == 1.0
    assert theory.recall_from_sigma(1e5, vocab_size) == pytest.approx(1.0 / vocab_size, rel=1e-3)
    # 1 − p is computed without cancellation: tiny but positive near σ → 0
    fail = theory.failure_from_inverse_sigma(15.0, vocab_size)
    assert 0.0 <= fail < 1e-15
    p, q = theory.recall_from_inverse_sigma(3.0, vocab_size), theory.failure_from_inverse_sigma(3.0, vocab_size)
    assert p + q == pytest.approx(1.0, abs=1e-12)


def test_v_two_is_closed_form():
    # V = 2: P(X_right > X_wrong) = P(N(1, 2σ²) > 0) = Φ(1/(σ√2))
    for sig in (0.1, 0.7, 3.0):
        assert theory.recall_from_sigma(sig, 2) == pytest.approx(special.ndtr(1 / (sig * math.sqrt(2))), rel=1e-10)


def test_huge_vocabulary_against_high_precision():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    v = 10**6
    for sig in (0.15, 0.2, 0.4):
        s = mpmath.mpf(1) / sig
        med = -float(special.ndtri(math.log(2) / (v - 1)))
        z0 = med - float(s)
        ref = mpmath.quad(lambda z: mpmath.npdf(z) * mpmath.ncdf(z + s) ** (v - 1),
                          [-mpmath.inf, z0 - 2, z0 - 1, z0, z0 + 1, z0 + 3, mpmath.inf])
        assert theory.recall_from_sigma(sig, v) == pytest.approx(float(ref), rel=1e-9)


def test_worked_example_of_the_docs():
    # docs/theory.md, "Eq. 19 and eq. 20": V=1024, N_f=16, D=32, N=16, a=1: Rem 4.3 0.609,
    # eq. 19 0.762, 0.988 without the +N term
    args = dict(vocab_size=1024, num_facts=16, d_model=32, d_state=16, a=1.0)
    assert theory.recall_probability(**args, form="rem43") == pytest.approx(0.609, abs=0.002)
    assert theory.recall_probability(**args) == pytest.approx(0.762, abs=0.002)
    s_without_n = math.sqrt(16 * 32 / 16)  # σ² = a·N_f/(N·D) only
    assert theory.recall_from_inverse_sigma(s_without_n, 1024) == pytest.approx(0.988, abs=0.002)


def test_sigma_and_layers():
    # σ² = 1.25·16/(8·32) + 1/32 = 5/64 + 2/64, worked by hand
    sig = theory.sigma(16, 32, 8, 1.25)
    assert sig ** 2 == pytest.approx(7 / 64, rel=1e-12)
    assert theory.inverse_sigma(16, 32, 8, 1.25) == pytest.approx(1 / sig)
    # Thm 4.6: Λ layers of N recall like one layer of Λ·N (the paper's (12,1),(6,2),(4,3),(3,4))
    ps = [theory.recall_probability(512, 80, 64, n, 1.25, lam) for n, lam in [(12, 1), (6, 2), (4, 3), (3, 4)]]
    assert max(ps) - min(ps) < 1e-12


def test_eq20_close_to_eq19_in_the_tails():
    s = np.linspace(0.0, 10.0, 201)
    for v in (128, 1024, 10**4, 10**6):
        p19 = theory.recall_from_inverse_sigma(s, v)
        p20 = theory.recall_from_inverse_sigma(s, v, "eq20")
        p43 = theory.recall_from_inverse_sigma(s, v, "rem43")
        tails = (p19 < 0.01) | (p19 > 0.99)
        assert np.max(np.abs(p20 - p19)[tails]) < 0.01
        assert np.sqrt(np.mean((p20 - p19) ** 2)) < 0.03
        # Rem 4.3 drops the correction to the maximum: lower at mid-range, further off than eq. 20
        mid = (p19 > 0.05) & (p19 < 0.95)
        assert np.all(p43[mid] < p19[mid])
        assert np.sqrt(np.mean((p43 - p19) ** 2)) > np.sqrt(np.mean((p20 - p19) ** 2))
    # m_V is the Gumbel location of the largest of V standard normals: P(max ≤ m_V) =
    # Φ(m_V)^V tends to 1/e as V grows (slowly, from above)
    at_max = [math.exp(v * special.log_ndtr(theory.m_v(v))) for v in (512, 10**6, 10**12)]
    assert all(math.exp(-1) < p < math.exp(-1) + 0.04 for p in at_max)
    assert at_max[0] > at_max[1] > at_max[2]
    assert theory.m_v(512) == pytest.approx(2.92, abs=0.01)  # docs/theory.md, "Eq. 19 and eq. 20"


def test_topk():
    s = np.linspace(0.0, 8.0, 41)
    p1 = theory.recall_from_inverse_sigma(s, 512)
    assert np.allclose(theory.topk_from_inverse_sigma(s, 512, 1), p1, rtol=1e-12, atol=1e-15)
    prev = p1
    for k in (2, 3, 5, 10, 50):
        pk = theory.topk_from_inverse_sigma(s, 512, k)
        assert np.all(pk >= prev - 1e-12) and np.any(pk > prev + 1e-3)
        prev = pk
    assert theory.topk_from_inverse_sigma(2.0, 16, 16) == 1.0
    # σ → ∞: the right one is uniformly ranked, top-k = k/V
    assert theory.topk_from_inverse_sigma(1e-5, 1000, 5) == pytest.approx(5 / 1000, rel=1e-3)


@pytest.mark.parametrize("vocab_size,sig,k", [(64, 0.5, 3), (1024, 0.4, 5)])
def test_topk_matches_monte_carlo(vocab_size, sig, k):
    rng = np.random.default_rng(k)
    trials = 4000
    mc = simulate_gaussian_model(vocab_size, sig, trials, rng, top_k=k)
    p = theory.topk_from_inverse_sigma(1 / sig, vocab_size, k)
    assert abs(mc - p) < 4.5 * math.sqrt(max(p * (1 - p), 1e-4) / trials)


def test_worst_case_lemma_4_1():
    v, d, n, nf = 1024, 4000, 3000, 2
    wc = theory.worst_case(v, nf, d, n, "ar")
    ev, ek = math.sqrt(4 * math.log(v) / d), math.sqrt(4 * math.log(v) / n)
    assert (wc.eps_v, wc.eps_k) == pytest.approx((ev, ek))
    assert wc.lhs == pytest.approx(ev + ek + 2 * nf * ev * ek)
    assert wc.solved == (ev + ek + 2 * nf * ev * ek < 0.5)
    mq = theory.worst_case(v, nf, d, n, "mqar", seq_len=64)
    assert mq.lhs == pytest.approx(ev + ek + 64 * ev * ek)
    assert theory.worst_case(v, nf, d, n, "mqar").lhs == pytest.approx(ev + ek + 4 * nf * ev * ek)
    assert not theory.worst_case(1024, 16, 32, 16, "ar").solved


def test_a_table():
    # the paper's a (Rem 4.3, docs/theory.md "The law"), by model kind and task family
    assert theory.coefficient_a("designed", "ar") == 2 and theory.coefficient_a("designed", "mqar") == 3
    assert theory.coefficient_a("linear", "ar") == 1 and theory.coefficient_a("linear", "mqar") == 1.25
    assert theory.coefficient_a("full", "ar") == 0.5 and theory.coefficient_a("full", "mqar") == 0.625
    with pytest.raises(ValueError, match="model_kind = 'transformer' is not allowed"):
        theory.coefficient_a("transformer", "ar")
    with pytest.raises(ValueError, match="family = 'mqar-repeated-keys' is not allowed: one of ar, mqar"):
        theory.coefficient_a("linear", "mqar-repeated-keys")  # a task's name, not its family


def test_plugins_declare_kind_and_family():
    from recallbench.law import declared

    assert declared.task_family("mqar-repeated-keys") == "mqar"
    assert declared.task_family("ar") == "ar"
    assert declared.model_kind("linear-mamba") == "linear"
    assert declared.model_kind("mamba") == "full"
    assert declared.model_kind("mamba") not in theory.COLLAPSE_KINDS
    assert declared.model_kind("attention") is None  # declares none: a black box
    assert declared.model_kind("no-such-adapter") is None and declared.task_family(None) is None


@pytest.mark.parametrize("form", theory.FORMS)
def test_requirement_round_trip(form):
    v, nf, a, d = 1024, 16, 1.25, 128
    req = theory.requirement(0.99, v, nf, a, d_model=d, form=form)
    # at the smallest N the law gives exactly the target; 2% less state falls short
    assert theory.recall_probability(v, nf, d, req.min_d_state, a, form=form) == pytest.approx(0.99, abs=1e-7)
    assert theory.recall_probability(v, nf, d, 0.98 * req.min_d_state, a, form=form) < 0.99
    assert req.min_nd < req.nd_at_d_model
    assert req.min_nd == pytest.approx(a * nf * req.inv_sigma ** 2)
    # the +N term: N·D = s*²(a·N_f + N), so N at fixed D is a real solve
    assert req.nd_at_d_model == pytest.approx(req.inv_sigma ** 2 * (a * nf + req.min_d_state))
    # two layers halve N per layer
    req2 = theory.requirement(0.99, v, nf, a, d_model=d, n_layers=2, form=form)
    assert req2.min_d_state == pytest.approx(req.min_d_state / 2)
    # too narrow: impossible
    assert math.isinf(theory.requirement(0.99, v, nf, a, d_model=req.min_d_model * 0.9, form=form).min_d_state)
    if form == "eq20":
        assert req.inv_sigma == pytest.approx(theory.m_v(v) + special.ndtri(0.99))
    # N·D grows like N_f·log(V/δ) (Rem 4.4): more facts or a stricter target need more
    assert theory.requirement(0.999, v, nf, a, form=form).min_nd > req.min_nd
    assert theory.requirement(0.99, v, 2 * nf, a, form=form).min_nd == pytest.approx(2 * req.min_nd)


def test_capacity_round_trip():
    cap = theory.capacity(64, 16, 512, 1.25, delta=0.01)
    assert theory.recall_probability(512, cap, 64, 16, 1.25) == pytest.approx(0.99, abs=1e-7)
    assert theory.capacity(4, 16, 512, 1.25) == 0.0


def test_fano_lemma_4_5():
    # docs/theory.md, "Fano": Fano's inequality for the N_f values X (uniform over V/2
    # each) read back with error δ: I(X; state) ≥ H(X) − h(δ) − δ·log2(|X| − 1), with the
    # entropy computed here from the distribution.  Lem 4.5 bounds h(δ) by 1 and |X| − 1
    # by |X|: never above the exact inequality, and at most 1 + h(δ) bit below it.
    for v, nf, delta in [(1024, 16, 0.01), (512, 32, 0.01), (512, 80, 0.0), (128, 16, 0.1)]:
        h_x = nf * stats.entropy(np.ones(v // 2), base=2)
        h_delta = stats.entropy([delta, 1 - delta], base=2)
        exact = h_x - h_delta - delta * math.log2(2.0 ** h_x - 1)
        lemma = theory.fano_min_bits(nf, v, delta)
        assert exact - 1 - h_delta - 1e-9 <= lemma <= exact + 1e-9
    # inverse: the largest N_f exactly uses b·S bits
    state, bits = 2 * 64 * 16, 32
    nmax = theory.fano_max_facts(state, bits, 512, 0.01)
    assert theory.fano_min_bits(nmax, 512, 0.01) == pytest.approx(state * bits)
    assert theory.linear_state_size(64, 16, 3) == 3 * 2 * 64 * 16


def test_designed_mqar_position_average_against_simulation():
    # Monte Carlo of the designed model on MQAR: a query at slot t (uniform over Zoology's
    # slots) reads with σ_t² = (t + N)/(N·D); the law at a_eff must give the same recall
    rng = np.random.default_rng(19)
    v, nf, seq_len, d, n, trials = 512, 16, 64, 32, 16, 6000
    slots = np.arange(2 * nf, seq_len, 2)  # 32, 34, ..., 62: Zoology's query slots
    assert np.array_equal(theory.mqar_query_positions(nf, seq_len), slots)
    sig = np.sqrt((rng.choice(slots, trials) + n) / (n * d))
    right = 1.0 + sig * rng.standard_normal(trials)
    wrong_max = sig * rng.standard_normal((trials, v - 1)).max(axis=1)
    mc = float(np.mean(right > wrong_max))
    p = theory.designed_mqar_recall(v, nf, seq_len, d, n)
    se = math.sqrt(p * (1 - p) / trials)
    assert abs(mc - p) < 4.5 * se, (mc, p)
    a_eff = theory.designed_mqar_effective_a(v, nf, seq_len, d, n)
    assert theory.recall_probability(v, nf, d, n, a_eff) == pytest.approx(p, abs=1e-9)
    # docs/theory.md, "The designed model": a_eff = 2.87 at L = 64 and 4.37 at L = 128 for
    # this setting, near the paper's designed-MQAR a = 3 at L = 4·N_f
    assert a_eff == pytest.approx(2.87, abs=0.005)
    assert theory.designed_mqar_effective_a(v, nf, 128, d, n) == pytest.approx(4.37, abs=0.005)
    for v, nf, d, n in [(1024, 16, 64, 8), (512, 32, 64, 32)]:
        assert 2.6 < theory.designed_mqar_effective_a(v, nf, 4 * nf, d, n) < 3.3


def test_forms_are_checked():
    with pytest.raises(ValueError):
        theory.recall_probability(512, 16, 32, 16, 1.0, form="eq21")
    with pytest.raises(ValueError):
        theory.required_inverse_sigma(1.0, 512)


def test_monte_carlo_helper_can_tell_forms_apart():
    # the simulation is sharp enough to reject Rem 4.3 where it differs from eq. 19
    rng = np.random.default_rng(7)
    mc = simulate_gaussian_model(1024, 0.25, 4000, rng)
    p43 = theory.recall_from_sigma(0.25, 1024, "rem43")
    assert abs(mc - p43) > 4.5 * math.sqrt(p43 * (1 - p43) / 4000)
    assert stats.binomtest(int(round(mc * 4000)), 4000, theory.recall_from_sigma(0.25, 1024)).pvalue > 1e-4
