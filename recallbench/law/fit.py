"""Maximum-likelihood fits of the recall law to measured counts.

Every measured point is a binomial count: ``correct`` right answers out of ``total``
queries (queries are treated as independent; those of one sequence are mildly
correlated, which the dispersion factor below absorbs).  Symbols as in
:mod:`recallbench.law.theory`: V ``vocab_size``, N_f ``num_facts``, D ``d_model``,
N ``d_state``, Λ ``n_layers``.

Fits
----
* :func:`fit_collapse`: (a, b) of the collapse p = Φ(x − b), x = √(N_eff·D/(a·N_f + N_eff)),
  N_eff = Λ·N (Rem 4.3 with Thm 4.6), beside the paper's constants (a from
  ``theory.A_TABLE``, b = √(2 log V)).
* :func:`fit_effective_state`: the fitted effective state of any model, the state of the
  simplified linear reference model that reproduces its accuracies (definition there).

Confidence intervals are **profile-likelihood** intervals: the set of values of the
parameter whose profile deviance 2·(nll − nll_min) stays below χ²₁(level)·φ, where
φ = max(1, deviance/(points − parameters)) is the quasi-binomial dispersion (φ = 1 with
``overdispersion=False``, or when there are no spare degrees of freedom).  A bound that
the data do not limit (all queries right, say) is reported as 0 or ``inf``.  The
likelihood machinery is :mod:`recallbench.law.binomial`'s.

The per-point interval and the Fano bound are imported here as well, where callers have
always found them: :func:`binomial_interval` (the Clopper-Pearson interval of one point,
:mod:`recallbench.law.binomial`), :func:`fano_check` (measurements that need more
information than the state can hold, Lem 4.5) and :func:`capacity_report`
(:mod:`recallbench.law.fano`).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import optimize, special, stats

from recallbench.law import theory
from recallbench.law.binomial import (_arrays, _dispersion, _minimize_1d, _nll,
                                      _profile_interval, _saturated_nll,  # noqa: F401
                                      binomial_interval)
from recallbench.law.fano import CapacityReport, FanoCheck, capacity_report, fano_check  # noqa: F401
from recallbench.law.quadrature import _quadrature

LOG_A_BOUNDS = (math.log(1e-3), math.log(1e3))
LOG_THETA_BOUNDS = (math.log(1e-4), math.log(1e9))


# -- the collapse fit (Rem 4.3, Thm 4.6) -----------------------------------------------

def collapse_x(d_model, d_state, num_facts, a, n_layers=1):
    """x = √(N_eff·D / (a·N_f + N_eff)) = 1/σ, N_eff = Λ·N: the collapse variable."""
    return theory.inverse_sigma(num_facts, d_model, d_state, a, n_layers)


def collapse_recall(x, b):
    """p = Φ(x − b): the collapse curve."""
    return theory._out(special.ndtr(np.asarray(x, float) - b))


@dataclasses.dataclass
class CollapseFit:
    """The fitted (a, b) of p = Φ(x − b), x = √(N_eff·D/(a·N_f + N_eff)), and the paper's."""

    a: float
    a_ci: tuple[float, float]
    b: float
    b_ci: tuple[float, float]
    paper_a: float | None  # theory.A_TABLE for the model kind and task family
    paper_b: float  # √(2 log V)
    vocab_size: float
    level: float
    nll: float
    deviance: float
    dof: int
    dispersion: float  # the factor the CI threshold was scaled by (≥ 1)
    n_points: int
    ci_method: str = "profile likelihood (quasi-binomial: threshold χ²₁·dispersion)"
    law: str = "p = Phi(sqrt(Lambda N D / (a N_f + Lambda N)) - b)"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def fit_collapse(correct, total, d_model, d_state, num_facts, vocab_size, n_layers=1,
                 family: str = "mqar", model_kind: str | None = "linear", level: float = 0.95,
                 overdispersion: bool = True) -> CollapseFit:
    """Maximum-likelihood (a, b) of the collapse law on binomial counts (one V).

    p_i = Φ(x_i(a) − b), x_i(a) = √(Λ_i·N_i·D_i / (a·N_f,i + Λ_i·N_i)).  The likelihood is
    profiled: for a fixed a the best b is a 1-D convex problem (probit), and a is found
    by a grid over log a ∈ [log 1e-3, log 1e3] then Brent's method.  Both CIs are profile
    likelihood intervals (see the module doc).  ``paper_a`` is ``A_TABLE[model_kind, family]``
    (None without a model kind), ``paper_b`` = √(2 log V).
    """
    k, n, d, ns, nf, v, lam = _arrays(correct, total, d_model, d_state, num_facts, vocab_size,
                                      n_layers)
    keep = n > 0
    k, n, d, ns, nf, v, lam = (x[keep] for x in (k, n, d, ns, nf, v, lam))
    if len(np.unique(v)) != 1:
        raise ValueError("fit_collapse needs points of one vocab_size (b depends on V)")
    if len(k) < 2:
        raise ValueError("fit_collapse needs at least 2 points with queries")
    n_eff = lam * ns
    if len(set(zip(n_eff, d, nf))) < 2:  # every point has the same x(a): one equation, two unknowns
        raise ValueError("fit_collapse needs points at 2 or more distinct (Λ·N, D, N_f): at one, "
                         "a and b are not identified")

    def nll(log_a, b):
        x = np.sqrt(n_eff * d / (math.exp(log_a) * nf + n_eff))
        return _nll(k, n, special.log_ndtr(x - b), special.log_ndtr(b - x))

    def best_b(log_a):
        res = optimize.minimize_scalar(lambda b: nll(log_a, b), bounds=(-20.0, 60.0),
                                       method="bounded", options={"xatol": 1e-10})
        return float(res.x), float(res.fun)

    def prof_a(log_a):
        return best_b(log_a)[1]

    def prof_b(b):
        return _minimize_1d(lambda la: nll(la, b), *LOG_A_BOUNDS, grid=21)[1]

    la_hat, f_hat = _minimize_1d(prof_a, *LOG_A_BOUNDS, grid=31)
    b_hat, f_hat2 = best_b(la_hat)
    f_hat = min(f_hat, f_hat2)
    deviance, dof, phi = _dispersion(f_hat, k, n, 2, overdispersion)
    thr = stats.chi2.ppf(level, 1) * phi
    la_lo, la_hi = _profile_interval(prof_a, la_hat, f_hat, *LOG_A_BOUNDS, thr)
    b_lo, b_hi = _profile_interval(prof_b, b_hat, f_hat, b_hat - 30.0, b_hat + 30.0, thr)
    b_lo = -math.inf if b_lo <= b_hat - 30.0 else b_lo
    b_hi = math.inf if b_hi >= b_hat + 30.0 else b_hi
    a_lo = 0.0 if la_lo <= LOG_A_BOUNDS[0] else math.exp(la_lo)
    a_hi = math.inf if la_hi >= LOG_A_BOUNDS[1] else math.exp(la_hi)
    paper_a = theory.coefficient_a(model_kind, family) if model_kind else None
    return CollapseFit(a=math.exp(la_hat), a_ci=(a_lo, a_hi), b=b_hat, b_ci=(b_lo, b_hi),
                       paper_a=paper_a, paper_b=theory.sqrt_2_log_v(v[0]),
                       vocab_size=float(v[0]), level=level, nll=f_hat, deviance=deviance,
                       dof=dof, dispersion=phi, n_points=len(k))


# -- the fitted effective state --------------------------------------------------------

@dataclasses.dataclass
class EffectiveStateFit:
    """The fitted effective state (see :func:`fit_effective_state` for the definition)."""

    theta: float  # the fitted multiplier: N_eff,i = theta · scale_i
    theta_ci: tuple[float, float]
    a: float  # the reference model's a (trained linear, for the task family)
    form: str
    expand: int
    level: float
    nll: float
    deviance: float
    dof: int
    dispersion: float
    n_points: int
    ci_method: str = "profile likelihood (quasi-binomial: threshold χ²₁·dispersion)"
    #: with guess levels: the fitted share φ ∈ [0, 1] of the guess the model makes when its
    #: read-out fails (p = φ·g + (1 − φ·g)·law), profiled out of θ's interval; else None
    guess_share: float | None = None

    def n_eff(self, scale=1.0):
        """N_eff (Λ·N of the reference) of a point with this scale, and its CI."""
        return (self.theta * scale, (self.theta_ci[0] * scale, self.theta_ci[1] * scale))

    def state(self, d_model, scale=1.0):
        """S_eff = expand·D·N_eff of a point of width D, and its CI."""
        f = self.expand * d_model * scale
        return (self.theta * f, (self.theta_ci[0] * f, self.theta_ci[1] * f))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def fit_effective_state(correct, total, d_model, num_facts, vocab_size, family: str = "mqar",
                        scale=1.0, form: str = "eq19", expand: int = 2, level: float = 0.95,
                        overdispersion: bool = True, guess=0.0) -> EffectiveStateFit:
    """The fitted effective state S_eff of a black-box model, by maximum likelihood.

    Definition.  The reference is the simplified linear Mamba (Alg. 1, expand 2, trained),
    whose recall the law gives as p = law(D, N_eff, N_f, V): σ² = a·N_f/(N_eff·D) + 1/D
    with a = ``A_TABLE["linear", family]`` (1 for AR, 5/4 for MQAR), then eq. 19 (or the
    ``form`` given).  Each measured point i keeps its own width D_i, facts N_f,i and
    vocabulary V_i.  One parameter θ is fitted over all points, with N_eff,i = θ·scale_i:

    * ``scale = 1`` (one model configuration measured on several tasks): θ is N_eff, the
      Λ·N a linear reference of the same width would need, and S_eff = expand·D·N_eff;
    * ``scale_i = S_i / (expand·D_i)`` (a grid of configurations with states S_i): θ is the
      state efficiency S_eff/S, pooled over the grid.

    S_eff,i = expand·D_i·N_eff,i (:meth:`EffectiveStateFit.state`).  The reference's noise
    never falls below σ² = 1/D, which caps its recall at p(1/σ = √D): accuracies above that
    cap (a wide-state model at small D) give S_eff = ``inf``.  θ is searched on
    [1e-4, 1e9]; an MLE at an end (all queries right, or at chance) is reported as
    ``inf`` (or 0), with the CI bound the data do set.

    ``guess`` (per point, default 0) is the task's guess level g (``Task.guess_level``,
    the bag-of-values guess).  A model whose read-out fails may still guess among the
    context's values, right with probability g; one that knows nothing of the bag (the
    designed model) guesses blind.  So the fit takes p = f + (1 − f)·law with the floor
    f = φ·g, φ ∈ [0, 1] fitted once for all points and profiled out of θ's interval
    (docs/theory.md, "Guessing").  Accuracy at g is then explained by the guess (φ = 1,
    θ = 0) and never forces a positive effective state, while a model that does not guess
    (φ = 0) is fitted by the plain law.  ``guess_share`` reports φ.
    """
    k, n, d, nf, v, sc, g = _arrays(correct, total, d_model, num_facts, vocab_size, scale, guess)
    keep = n > 0
    k, n, d, nf, v, sc, g = (x[keep] for x in (k, n, d, nf, v, sc, g))
    if np.any((g < 0) | (g >= 1)):
        raise ValueError("fit_effective_state: guess levels must lie in [0, 1)")
    if len(k) < 1:
        raise ValueError("fit_effective_state needs at least one point with queries")
    a = theory.coefficient_a("linear", family)

    def law(log_theta):
        """(p, 1 − p) of the linear reference at N_eff = θ·scale, per point."""
        n_eff = math.exp(log_theta) * sc
        s = np.sqrt(n_eff * d / (a * nf + n_eff))
        if form == "eq19":
            p, q = _quadrature(s, v, 1)
        else:
            p = np.asarray(theory.recall_from_inverse_sigma(s, v, form))
            q = np.asarray(theory.failure_from_inverse_sigma(s, v, form))
        return np.maximum(p, 1e-300), np.maximum(q, 1e-300)

    def nll(log_theta):
        p, q = law(log_theta)
        if not guessing:
            return _nll(k, n, np.log(p), np.log(q))
        return _best_share(p, q)[1]

    def _share_nll(share, p, q):
        f = share * g
        return _nll(k, n, np.log(f + (1.0 - f) * p), np.log1p(-f) + np.log(q))

    def _best_share(p, q):
        """min over φ ∈ [0, 1] of the nll at fixed law read-outs (p, q).  The nll is convex
        in φ (minus a sum of logs of affine functions), so its minimum is an end where the
        slope points out, else the root of the slope: safeguarded Newton in a bracket."""
        u = g * (1.0 - p)  # d/dφ of the accuracy φ·g + (1 − φ·g)·p

        def slope(t):
            return float(-np.sum(k * u / (p + t * u) - (n - k) * g / (1.0 - t * g)))

        def curve(t):
            return float(np.sum(k * u * u / (p + t * u) ** 2
                                + (n - k) * g * g / (1.0 - t * g) ** 2))

        if slope(0.0) >= 0:
            t = 0.0
        elif slope(1.0) <= 0:
            t = 1.0
        else:
            lo_t, hi_t, t = 0.0, 1.0, 0.5
            for _ in range(60):
                s = slope(t)
                if s > 0:
                    hi_t = t
                else:
                    lo_t = t
                c = curve(t)
                step = t - s / c if c > 0 else 0.5 * (lo_t + hi_t)
                new = step if lo_t < step < hi_t else 0.5 * (lo_t + hi_t)
                if abs(new - t) < 1e-13:
                    t = new
                    break
                t = new
        return t, _share_nll(t, p, q)

    guessing = bool(np.any(g > 0))
    lo, hi = LOG_THETA_BOUNDS
    lt_hat, f_hat = _minimize_1d(nll, lo, hi, grid=41)
    # the guess share is not counted as a degree of freedom: bounded in [0, 1] and most
    # often at an end, it would leave two cells no spare degree and collapse the
    # dispersion to 1 (intervals as if the trained cells were binomial draws of the law)
    deviance, dof, phi = _dispersion(f_hat, k, n, 1, overdispersion)
    thr = stats.chi2.ppf(level, 1) * phi
    lt_lo, lt_hi = _profile_interval(nll, lt_hat, f_hat, lo, hi, thr)
    theta = math.exp(lt_hat)
    # an MLE in a flat end of the range is at the boundary: report 0 or inf
    if abs(nll(hi) - f_hat) < 1e-9 * max(1.0, abs(f_hat)) and lt_hi >= hi:
        theta = math.inf
    elif abs(nll(lo) - f_hat) < 1e-9 * max(1.0, abs(f_hat)) and lt_lo <= lo:
        theta = 0.0
    ci = (0.0 if lt_lo <= lo else math.exp(lt_lo), math.inf if lt_hi >= hi else math.exp(lt_hi))
    share = None
    if guessing:
        share = _best_share(*law(lt_hat))[0]
    return EffectiveStateFit(theta=theta, theta_ci=ci, a=a, form=form, expand=expand, level=level,
                             nll=f_hat, deviance=deviance, dof=dof, dispersion=phi,
                             n_points=len(k), guess_share=share)
