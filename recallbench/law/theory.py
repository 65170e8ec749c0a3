"""The recall scaling law of Koren et al. (2026), "On the Recall Scaling Laws in Mamba".

Glossary (the paper's symbols; argument names in parentheses)
-------------------------------------------------------------
V   (``vocab_size``)   vocabulary size; keys and values each take one half, V_v = V/2
N_f (``num_facts``)    key-value facts in the context
L   (``seq_len``)      sequence length
D   (``d_model``)      model width
N   (``d_state``)      SSM state size per channel
Λ   (``n_layers``)     layers; a Λ-layer model recalls like one layer with N_eff = Λ·N (Thm 4.6)
a                      noise coefficient of the model kind and task family (``A_TABLE``,
                       :mod:`recallbench.law.coefficients`)
b                      offset of the collapse curve, ≈ √(2 log V)
σ   (``sigma``)        noise of the read-out: σ² = a·N_f/(N·D) + 1/D (Thm 4.2)
s   (``inv_sigma``)    1/σ = √(N·D/(a·N_f + N)), the collapse variable x of Rem 4.3
δ   (``delta``)        allowed failure probability
S, b_s                 state scalars and bits per scalar (Lem 4.5)

``log`` is the natural logarithm; ``log2`` is written out.

The Gaussian model (Thm 4.2): the read-out at the right value coordinate is
N(1, σ²), at each of the V − 1 others N(0, σ²), independently; recall succeeds when
the right coordinate is the argmax.  The success probability has three forms, and every
function that returns it takes ``form``:

* ``"eq19"`` (default): the exact integral of the Gaussian model, eq. 19,
  p = ∫ φ((x−1)/σ)/σ · Φ(x/σ)^(V−1) dx = ∫ φ(z) · Φ(z + 1/σ)^(V−1) dz,
  computed by composite Gauss-Legendre quadrature in log space
  (:mod:`recallbench.law.quadrature`);
* ``"eq20"``: the Gumbel approximation of the maximum, eq. 20, p ≈ Φ(1/σ − m_V) with
  m_V = √(2 log V) − (log log V + log 4π) / (2 √(2 log V));
* ``"rem43"``: the coarse form of Rem 4.3, p ≈ Φ(1/σ − √(2 log V)), which drops the
  correction to the maximum of V Gaussians and reads 0.1–0.2 lower at mid-range.

Everything is vectorized over numpy arrays (broadcasting) and returns floats for scalar input.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import optimize, special

from recallbench.law.coefficients import (A_TABLE, COLLAPSE_KINDS, MODEL_KINDS,  # noqa: F401
                                          TASK_FAMILIES, check_family, coefficient_a)
from recallbench.law.quadrature import _quadrature

FORMS = ("eq19", "eq20", "rem43")


def _out(x):
    """A 0-d array becomes a Python float; anything else stays an array."""
    x = np.asarray(x, dtype=float)
    return float(x) if x.ndim == 0 else x


def _check_form(form: str) -> None:
    if form not in FORMS:
        raise ValueError(f"form = {form!r} is not allowed: one of {', '.join(FORMS)}")


# -- σ (Thm 4.2, Thm 4.6) -----------------------------------------------------------

def sigma(num_facts, d_model, d_state, a, n_layers=1):
    """σ = √(a·N_f/(N_eff·D) + 1/D) with N_eff = Λ·N (Thm 4.2; layers by Thm 4.6)."""
    n_eff = np.asarray(n_layers, float) * np.asarray(d_state, float)
    return _out(np.sqrt(np.asarray(a, float) * np.asarray(num_facts, float)
                        / (n_eff * np.asarray(d_model, float)) + 1.0 / np.asarray(d_model, float)))


def inverse_sigma(num_facts, d_model, d_state, a, n_layers=1):
    """1/σ = √(N_eff·D / (a·N_f + N_eff)), the collapse variable x of Rem 4.3 (N_eff = Λ·N)."""
    n_eff = np.asarray(n_layers, float) * np.asarray(d_state, float)
    return _out(np.sqrt(n_eff * np.asarray(d_model, float)
                        / (np.asarray(a, float) * np.asarray(num_facts, float) + n_eff)))


def sqrt_2_log_v(vocab_size):
    """√(2 log V): Rem 4.3's threshold, p ≈ Φ(1/σ − √(2 log V)), and m_V's leading term."""
    return _out(np.sqrt(2.0 * np.log(np.asarray(vocab_size, float))))


def m_v(vocab_size):
    """m_V = √(2 log V) − (log log V + log 4π) / (2 √(2 log V)), eq. 20 (V ≥ 3)."""
    v = np.asarray(vocab_size, float)
    r = np.asarray(sqrt_2_log_v(v))
    return _out(r - (np.log(np.log(v)) + np.log(4.0 * np.pi)) / (2.0 * r))


def _threshold(vocab_size, form: str):
    """b of the two Gaussian forms, p = Φ(1/σ − b): m_V (eq. 20) or √(2 log V) (Rem 4.3)."""
    return np.asarray(m_v(vocab_size) if form == "eq20" else sqrt_2_log_v(vocab_size))


# -- the recall probability: eq. 19 (by quadrature), eq. 20, Rem 4.3 ------------------

def recall_from_inverse_sigma(inv_sig, vocab_size, form: str = "eq19"):
    """Recall probability at 1/σ = ``inv_sig`` (eq. 19, eq. 20 or Rem 4.3, see module doc)."""
    _check_form(form)
    s = np.asarray(inv_sig, float)
    if form == "eq19":
        return _out(_quadrature(s, vocab_size, 1)[0])
    return _out(special.ndtr(s - _threshold(vocab_size, form)))


def failure_from_inverse_sigma(inv_sig, vocab_size, form: str = "eq19"):
    """1 − p at 1/σ, computed without cancellation (useful when p is within 1e-16 of 1)."""
    _check_form(form)
    s = np.asarray(inv_sig, float)
    if form == "eq19":
        return _out(_quadrature(s, vocab_size, 1)[1])
    return _out(special.ndtr(_threshold(vocab_size, form) - s))


def recall_from_sigma(sig, vocab_size, form: str = "eq19"):
    """Recall probability at noise σ (eq. 19 by default).  σ = 0 gives 1; σ → ∞ gives 1/V."""
    sig = np.asarray(sig, float)
    with np.errstate(divide="ignore"):
        return recall_from_inverse_sigma(1.0 / sig, vocab_size, form)


def recall_probability(vocab_size, num_facts, d_model, d_state, a, n_layers=1, form: str = "eq19"):
    """p for a model of width D, state N, Λ layers, holding N_f facts (Thm 4.2 with Thm 4.6).

    σ² = a·N_f/(Λ·N·D) + 1/D, then eq. 19 (default), eq. 20 or Rem 4.3 by ``form``.
    Example (docs/theory.md, "Eq. 19 and eq. 20"): V=1024, N_f=16, D=32, N=16, a=1 gives
    0.762 (eq. 19), 0.609 (Rem 4.3).
    """
    return recall_from_inverse_sigma(inverse_sigma(num_facts, d_model, d_state, a, n_layers),
                                     vocab_size, form)


def topk_from_inverse_sigma(inv_sig, vocab_size, top_k):
    """Top-k (listwise) recall of the Gaussian model of eq. 19 (beyond the paper).

    p_k = ∫ φ((x−1)/σ)/σ · P(Binom(V−1, 1 − Φ(x/σ)) ≤ k − 1) dx: fewer than k of the V − 1
    wrong coordinates exceed the right one.  k = 1 is eq. 19; p_k is increasing in k and
    equals 1 for k ≥ V.  The binomial CDF is the regularized incomplete beta function
    (``scipy.special.bdtr``), stable for V up to 1e9.
    """
    return _out(_quadrature(np.asarray(inv_sig, float), vocab_size, top_k)[0])


# -- the worst case (Lem 4.1) ---------------------------------------------------------

@dataclasses.dataclass
class WorstCase:
    """Lem 4.1: ε_v = √(4 log V / D), ε_k = √(4 log V / N); solved if lhs < 1/2."""

    eps_v: float
    eps_k: float
    lhs: float  # ε_v + ε_k + c·ε_v·ε_k, c = 2N_f (AR) or L (MQAR)
    solved: bool


def worst_case(vocab_size: int, num_facts: int, d_model: int, d_state: int, family: str = "ar",
               seq_len: int | None = None) -> WorstCase:
    """Lem 4.1's sufficient condition for exact recall of every query, for a task family.

    AR is solved if ε_v + ε_k + 2N_f·ε_v·ε_k < 1/2, MQAR if ε_v + ε_k + L·ε_v·ε_k < 1/2.
    For MQAR ``seq_len`` defaults to 4·N_f.
    """
    log_v = math.log(vocab_size)
    eps_v = math.sqrt(4.0 * log_v / d_model)
    eps_k = math.sqrt(4.0 * log_v / d_state)
    check_family(family)
    if family == "ar":
        c = 2.0 * num_facts
    else:
        c = float(seq_len if seq_len is not None else 4 * num_facts)
    lhs = eps_v + eps_k + c * eps_v * eps_k
    return WorstCase(eps_v, eps_k, lhs, lhs < 0.5)


# -- requirements (Rem 4.4) -----------------------------------------------------------

def required_inverse_sigma(target: float, vocab_size: float, form: str = "eq19") -> float:
    """The smallest 1/σ with p(1/σ) ≥ ``target`` (p is increasing in 1/σ).

    eq. 20 and Rem 4.3 invert in closed form (1/σ = m_V + Φ⁻¹(target), resp. √(2 log V) +
    Φ⁻¹(target)); eq. 19 by Brent's method on log p (or log(1 − p) above 1/2).  Returns 0
    when the target is at or below chance (1/V for eq. 19).
    """
    _check_form(form)
    if not 0.0 < target < 1.0:
        raise ValueError(f"target = {target!r} is not allowed: must be in (0, 1)")
    if form in ("eq20", "rem43"):
        return max(0.0, float(_threshold(vocab_size, form)) + float(special.ndtri(target)))
    if target <= 1.0 / vocab_size:
        return 0.0
    if target > 0.5:
        goal = math.log1p(-target)

        def g(s):
            return math.log(max(failure_from_inverse_sigma(s, vocab_size), 1e-300)) - goal

        sign = -1.0
    else:
        goal = math.log(target)

        def g(s):
            return math.log(max(recall_from_inverse_sigma(s, vocab_size), 1e-300)) - goal

        sign = 1.0
    hi = max(1.0, float(m_v(max(vocab_size, 3))) + abs(float(special.ndtri(target))) + 1.0)
    while sign * g(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(g, 0.0, hi, xtol=1e-12, rtol=1e-12))


@dataclasses.dataclass
class Requirement:
    """What Rem 4.4 asks for a target probability (see :func:`requirement`)."""

    target: float
    form: str
    inv_sigma: float  # s*: the 1/σ that reaches the target
    min_nd: float  # inf over all (N, D) of N_eff·D = a·N_f·s*² (approached as D → ∞)
    min_d_model: float  # D must exceed s*² (σ² ≥ 1/D whatever N is)
    d_model: float | None = None  # the given D, if any
    min_d_state: float | None = None  # smallest N (per layer) at that D; inf if D ≤ s*²
    nd_at_d_model: float | None = None  # N_min·D at that D (per layer)
    asymptotic_nd: float = 0.0  # Rem 4.4's order: N_f·log(V/δ), constant 1, for comparison


def requirement(target: float, vocab_size: float, num_facts: float, a: float,
                d_model: float | None = None, n_layers: int = 1,
                form: str = "eq19") -> Requirement:
    """Smallest state for recall probability ≥ ``target`` (Rem 4.4, from the chosen form).

    p depends on (N, D) only through 1/σ² = N_eff·D/(a·N_f + N_eff), N_eff = Λ·N.  Let s* be
    the 1/σ that reaches the target (:func:`required_inverse_sigma`, root finding on eq. 19
    by default).  Then N_eff·D = s*²·(a·N_f + N_eff) > a·N_f·s*²: the infimum of N·D is
    a·N_f·s*² (the +N term makes it unreachable at finite D), D must exceed s*², and at a
    given D the smallest N_eff is a·N_f·s*² / (D − s*²), i.e. N = that / Λ per layer.
    """
    s_star = required_inverse_sigma(target, vocab_size, form)
    s2 = s_star * s_star
    delta = 1.0 - target
    req = Requirement(target=target, form=form, inv_sigma=s_star, min_nd=a * num_facts * s2,
                      min_d_model=s2, asymptotic_nd=num_facts * math.log(vocab_size / delta))
    if d_model is not None:
        req.d_model = float(d_model)
        if d_model > s2:
            n_eff = a * num_facts * s2 / (d_model - s2)
            req.min_d_state = n_eff / n_layers
            req.nd_at_d_model = req.min_d_state * d_model
        else:
            req.min_d_state = math.inf
            req.nd_at_d_model = math.inf
    return req


def capacity(d_model, n_eff, vocab_size, a, delta: float = 0.01, form: str = "eq19"):
    """Largest N_f (continuous) recalled with probability ≥ 1 − δ by width D and N_eff = Λ·N.

    From s*² ≤ N_eff·D/(a·N_f + N_eff): N_f* = N_eff·(D − s*²)/(a·s*²), 0 when D ≤ s*².
    """
    s2 = np.vectorize(lambda v: required_inverse_sigma(1.0 - delta, float(v), form) ** 2)(
        np.asarray(vocab_size, float))
    d = np.asarray(d_model, float)
    return _out(np.maximum(0.0, np.asarray(n_eff, float) * (d - s2) / (np.asarray(a, float) * s2)))


# -- the information bound (Lem 4.5) --------------------------------------------------

def fano_min_bits(num_facts, vocab_size, delta=0.01):
    """Lem 4.5: bits b·S any fixed-state model needs to recall with probability > 1 − δ.

    b·S ≥ (1 − δ)·N_f·log2(V_v) − 1, V_v = V/2 (uniform i.i.d. values).
    """
    v_v = np.asarray(vocab_size, float) / 2.0
    return _out((1.0 - np.asarray(delta, float)) * np.asarray(num_facts, float) * np.log2(v_v) - 1.0)


def fano_max_facts(state_size, state_bits, vocab_size, delta=0.01):
    """Lem 4.5 inverted: the most facts S scalars of b bits can hold at failure rate δ.

    N_f ≤ (b·S + 1) / ((1 − δ)·log2(V/2)).
    """
    bits = np.asarray(state_size, float) * np.asarray(state_bits, float)
    return _out((bits + 1.0) / ((1.0 - np.asarray(delta, float))
                                * np.log2(np.asarray(vocab_size, float) / 2.0)))


def linear_state_size(d_model, d_state, n_layers=1, expand=2):
    """S of the simplified linear Mamba: Λ·(expand·D)·N scalars (2·D·N per layer)."""
    return _out(np.asarray(n_layers, float) * expand * np.asarray(d_model, float)
                * np.asarray(d_state, float))


# -- MQAR's average over query positions (Thm 4.2, designed model) --------------------

def mqar_query_positions(num_facts: int, seq_len: int) -> np.ndarray:
    """Zoology's MQAR query slots: 2N_f + 2g for g = 0 .. (L − 2N_f)/2 − 1 (uniform for power_a=1)."""
    gaps = np.arange((seq_len - 2 * num_facts) // 2)
    if gaps.size == 0:
        raise ValueError(f"seq_len = {seq_len} is not allowed: MQAR needs L > 2·num_facts")
    return 2 * num_facts + 2 * gaps


def designed_mqar_recall(vocab_size, num_facts, seq_len, d_model, d_state, n_layers=1,
                         form: str = "eq19") -> float:
    """The designed model's MQAR recall averaged over the query positions (Thm 4.2).

    The designed model writes every token into its state, fillers in the query region
    included, so a query at position t sees σ_t² ≈ (t + N_eff)/(N_eff·D): the a·N_f of
    σ² becomes t.  Queries are uniform over Zoology's slots t = 2N_f + 2g (power_a = 1);
    p = mean_t p(1/σ_t).  At L = 4N_f the mean slot is 3N_f − 1, hence the paper's a = 3
    (see :func:`designed_mqar_effective_a`).
    """
    t = mqar_query_positions(num_facts, seq_len).astype(float)
    n_eff = float(n_layers) * d_state
    s = np.sqrt(n_eff * d_model / (t + n_eff))
    return float(np.mean(np.asarray(recall_from_inverse_sigma(s, vocab_size, form))))


def designed_mqar_effective_a(vocab_size, num_facts, seq_len, d_model, d_state, n_layers=1,
                              form: str = "eq19") -> float:
    """The a for which p(σ² = a·N_f/(N·D) + 1/D) equals :func:`designed_mqar_recall`.

    a_eff ≈ 2 + (L − 2N_f)/(2N_f), i.e. ≈ 3 at L = 4N_f, the paper's designed-MQAR a
    (docs/theory.md, "The designed model").
    """
    target = designed_mqar_recall(vocab_size, num_facts, seq_len, d_model, d_state, n_layers, form)

    def g(a):
        return recall_probability(vocab_size, num_facts, d_model, d_state, a, n_layers, form) - target

    return float(optimize.brentq(g, 1e-6, 1e6, xtol=1e-10, rtol=1e-10))
