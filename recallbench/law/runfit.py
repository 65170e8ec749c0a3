"""N50 from training runs: a free-slope, guess-aware probit model with run-to-run noise.

    f = fit_runs(num_facts, correct, total, units, guess, capped)
    f.n50, f.n50_ci          # N_f where a run recalls half the queries above the guess
    f.slope, f.tau, f.failure_rate

Each training run r (one seed, one N_f = n_r) is one observation; nothing is chosen among
runs.  With g_r = 1/N_f the guess level, a run's share above the guess is
q_r = (acc_r − g_r)/(1 − g_r), and the model is

    Φ⁻¹(q_r) = β·(ln N50 − ln n_r) + e_r,   e_r ~ N(0, τ² + v_r)         (a probit line)

with a free slope β (the law's is about 1 in ln N_f, trained models' 1.1-1.9), τ the
run-to-run (seed) scatter and v_r the run's own test noise (delta method on its
sequences, :func:`recallbench.law.guess.units`).  A run is an optimisation failure with
probability λ: it then stays at the guess.  Censoring keeps every run in the likelihood:
a run not above its guess at 95% is left-censored (a failure, or a q below what the test
resolves), one at q ≥ :data:`Q_HIGH` right-censored (the early stop caps it), and one the
step cap cut while improving right-censored at its own q (a lower bound).

The interval of ln N50 is a profile-likelihood interval whose threshold is the exact
small-sample one of a line with unknown noise, n·ln(1 + F(1, n − 2)/(n − 2)) over the n
uncensored runs (Fieller's interval when nothing is censored): the χ²₁ threshold assumes
the noise known, and cards have 4-20 runs.  Its coverage is checked on synthetic cards
(benchmarks/card_coverage.py).  Finney (1971), *Probit Analysis*; Fieller (1954).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import optimize, special, stats

from recallbench.law.blas import one_thread

#: a run whose share above the guess reaches this is right-censored (the early stop caps it)
Q_HIGH = 0.99
#: one-sided level of the test that a run is above its guess level
DETECT = 0.95
#: bounds of the parameters: ln N50, ln β, ln τ, λ
BOUNDS = ((math.log(0.25), math.log(1e7)), (math.log(0.05), math.log(20.0)),
          (math.log(1e-3), math.log(5.0)), (0.0, 0.5))
#: ln τ where the search starts (the median seed scatter of trained cards is about 0.2)
TAU0 = math.log(0.2)


@dataclasses.dataclass
class RunFit:
    """What :func:`fit_runs` found (see the module)."""

    n50: float
    n50_ci: tuple[float, float]  # (0 or a value, a value or inf)
    slope: float  # β: −dΦ⁻¹(q)/d ln N_f
    tau: float  # run-to-run SD on the probit scale
    failure_rate: float  # λ
    n_runs: int
    n_observed: int  # runs neither censored nor failed: the n of the threshold
    test_sd: float  # RMS test noise of the uncensored runs on the probit scale (0: none)
    threshold: float
    nll: float
    bracketed: bool  # a cell's median run above q = 1/2 and another's below
    level: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def shares(correct, total, units, guess):
    """(q̂, its standard error) of each run: the share above the guess and its test noise
    on ``units`` independent sequences."""
    k, n, u, g = (np.asarray(x, float) for x in np.broadcast_arrays(correct, total, units, guess))
    acc = np.where(n > 0, k / np.where(n > 0, n, 1.0), 0.0)
    q = (acc - g) / (1.0 - g)
    a = np.clip(acc, 0.5 / np.maximum(u, 1), 1 - 0.5 / np.maximum(u, 1))
    se = np.sqrt(a * (1 - a) / np.maximum(u, 1)) / (1.0 - g)
    return q, se


def classify(correct, total, units, guess, capped):
    """Per run: kind 0 observed, 1 left-censored (not above the guess), 2 right-censored at
    the ceiling, 3 right-censored by the step cap; its probit z (or censoring point) and
    test variance on that scale."""
    q, se = shares(correct, total, units, guess)
    u, g = (np.asarray(x, float) for x in np.broadcast_arrays(units, guess))
    capped = np.broadcast_to(np.asarray(capped, bool), q.shape)
    detect = stats.norm.ppf(DETECT) * np.sqrt(g * (1 - g) / np.maximum(u, 1)) / (1 - g)
    low = q <= detect
    high = ~low & (q >= Q_HIGH)
    kind = np.where(low, 1, np.where(high, 2, np.where(capped, 3, 0)))
    edge = np.where(low, np.clip(detect, 1e-6, 0.5), np.where(high, Q_HIGH, np.clip(q, 1e-6, Q_HIGH)))
    z = special.ndtri(edge)
    v = (se / np.maximum(stats.norm.pdf(z), 1e-12)) ** 2
    return kind, z, np.minimum(v, 25.0)


def _nll(params, x, kind, z, v):
    ell, lb, lt, lam = params
    beta, tau = math.exp(lb), math.exp(lt)
    mu = beta * (ell - x)
    s = np.sqrt(tau * tau + v)
    t = (z - mu) / s
    total = 0.0
    ok = kind == 0
    if ok.any():
        total += np.sum(-0.5 * t[ok] ** 2 - np.log(s[ok])) - 0.5 * math.log(2 * math.pi) * ok.sum()
    lo = kind == 1
    if lo.any():
        total += np.sum(np.log(lam + (1 - lam) * special.ndtr(t[lo]) + 1e-300))
    hi = kind >= 2
    if hi.any():
        total += np.sum(special.log_ndtr(-t[hi]))
    n_learned = int(np.sum(~lo))
    if n_learned:
        total += n_learned * math.log1p(-lam) if lam < 1 else -math.inf
    return -float(total)


def _start(x, kind, z):
    """Starting points: a least-squares line through the uncensored runs, and the defaults."""
    starts = []
    ok = kind == 0
    if ok.sum() >= 2 and np.ptp(x[ok]) > 0:
        b, a = np.polyfit(x[ok], z[ok], 1)
        if b < 0:
            starts.append((-a / b, math.log(-b)))
    mid = float(np.median(x))
    starts += [(mid, math.log(1.3)), (mid, math.log(0.6))]
    return [(float(np.clip(e, *BOUNDS[0])), float(np.clip(lb, *BOUNDS[1])), TAU0, 0.02)
            for e, lb in starts]


def _minimize(f, starts, bounds):
    best = None
    with one_thread():
        for s in starts:
            r = optimize.minimize(f, np.asarray(s, float), method="L-BFGS-B", bounds=bounds)
            if best is None or r.fun < best.fun:
                best = r
    return best


def fit_runs(num_facts, correct, total, units, guess, capped=False,
             level: float = 0.95) -> RunFit:
    """The model of the module fitted to runs at ``num_facts``; arrays broadcast."""
    nf, k, n, u, g = (np.atleast_1d(np.asarray(a, float))
                      for a in np.broadcast_arrays(num_facts, correct, total, units, guess))
    cap = np.broadcast_to(np.asarray(capped, bool), nf.shape)
    keep = n > 0
    nf, k, n, u, g, cap = nf[keep], k[keep], n[keep], u[keep], g[keep], cap[keep]
    if nf.size == 0:
        raise ValueError("fit_runs needs at least one run with queries")
    x = np.log(nf)
    kind, z, v = classify(k, n, u, g, cap)
    f = lambda p: _nll(p, x, kind, z, v)  # noqa: E731
    best = _minimize(f, _start(x, kind, z), BOUNDS)
    n_obs = int(np.sum(kind == 0))
    test_sd = math.sqrt(float(np.mean(v[kind == 0]))) if n_obs else 0.0
    medians = [float(np.median(z[nf == c])) for c in np.unique(nf)]
    bracketed = bool(max(medians) > 0 > min(medians))
    dof = n_obs - 3
    thr = n_obs * math.log1p(stats.f.ppf(level, 1, dof) / dof) if dof >= 1 else math.inf
    ell = float(best.x[0])
    nuisance = BOUNDS[1:]
    memo = {"x": best.x[1:].copy()}

    def prof(e):
        r = _minimize(lambda p: f((e, *p)), [memo["x"], best.x[1:]], nuisance)
        memo["x"] = r.x
        return float(r.fun)

    lo_b, hi_b = BOUNDS[0]
    lo, hi = (lo_b, hi_b) if math.isinf(thr) else _interval(prof, ell, float(best.fun), thr,
                                                             lo_b, hi_b, memo, best.x[1:])
    ci = (0.0 if lo <= lo_b + 1e-9 else math.exp(lo), math.inf if hi >= hi_b - 1e-9 else math.exp(hi))
    return RunFit(n50=math.exp(ell), n50_ci=ci, slope=math.exp(best.x[1]), tau=math.exp(best.x[2]),
                  failure_rate=float(best.x[3]), n_runs=int(nf.size), n_observed=n_obs,
                  test_sd=test_sd, threshold=thr, nll=float(best.fun), bracketed=bracketed,
                  level=level)


def _interval(prof, ell, f_hat, thr, lo_b, hi_b, memo, x0):
    """Where 2·(profile − f_hat) crosses ``thr`` on each side of ``ell``, walking out in
    steps of 0.05 doubling (the nuisance parameters warm-started along the walk).  The
    profile is a minimisation from warm starts, so its value at a point can differ when
    evaluated again; where Brent's method then finds no sign change between the walk's
    last two points, the crossing is bisected on the signs as evaluated."""
    def g(e):
        return 2.0 * (prof(e) - f_hat) - thr

    def crossing(inner, outer):
        try:
            return float(optimize.brentq(g, inner, outer, xtol=1e-6))
        except ValueError:
            while abs(outer - inner) > 1e-6:
                mid = 0.5 * (inner + outer)
                inner, outer = (inner, mid) if g(mid) >= 0 else (mid, outer)
            return float(outer)

    out = []
    for edge in (lo_b, hi_b):
        memo["x"] = x0.copy()
        step = 0.05 if edge > ell else -0.05
        inner, found = ell, None
        while found is None:
            outer = ell + step
            if (outer - edge) * step >= 0:
                outer = edge
            if g(outer) >= 0:
                found = crossing(inner, outer)
            elif outer == edge:
                found = edge
            inner, step = outer, step * 2.0
        out.append(found)
    return out[0], out[1]
