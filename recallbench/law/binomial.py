"""Binomial counts: one point's interval, and the likelihood machinery the fits share.

Every measured point is a binomial count, ``correct`` right answers out of ``total``
queries.  :func:`binomial_interval` is the Clopper-Pearson interval of one point; the
rest is what the maximum-likelihood fits (:mod:`recallbench.law.fit`,
:mod:`recallbench.law.topk`, :mod:`recallbench.law.extended`) are built from: the
negative log-likelihood, the deviance against the saturated model and the quasi-binomial
dispersion, a global 1-D minimum, and the profile-likelihood interval of one parameter.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from scipy import optimize, stats

from recallbench.law.theory import _out


def binomial_interval(correct, total, level: float = 0.95):
    """Clopper-Pearson (exact) interval of a binomial proportion; arrays broadcast.

    Returns ``(lower, upper)``; 0 right answers gives lower 0, all right gives upper 1.
    """
    k = np.asarray(correct, float)
    n = np.asarray(total, float)
    alpha = 1.0 - level
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
        hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return _out(lo), _out(hi)


def _arrays(*xs):
    """The arguments broadcast to one shape, as 1-D float arrays."""
    return [np.atleast_1d(np.asarray(x, float)) for x in np.broadcast_arrays(*xs)]


def _nll(k, n, log_p, log_q):
    """Binomial negative log-likelihood (without the constant log C(n, k))."""
    return float(-np.sum(k * log_p + (n - k) * log_q))


def _saturated_nll(k, n):
    with np.errstate(divide="ignore", invalid="ignore"):
        ph = k / n
        t1 = np.where(k > 0, k * np.log(np.where(k > 0, ph, 1.0)), 0.0)
        t2 = np.where(n - k > 0, (n - k) * np.log(np.where(n - k > 0, 1 - ph, 1.0)), 0.0)
    return float(-np.sum(t1 + t2))


def _dispersion(nll_min, k, n, n_params, overdispersion):
    deviance = 2.0 * (nll_min - _saturated_nll(k, n))
    dof = len(k) - n_params
    if not overdispersion or dof <= 0:
        return deviance, dof, 1.0
    return deviance, dof, max(1.0, deviance / dof)


def _minimize_1d(f: Callable[[float], float], lo: float, hi: float, grid: int = 25):
    """Global-ish minimum of a 1-D function on [lo, hi]: a grid, then bounded Brent."""
    xs = np.linspace(lo, hi, grid)
    ys = np.array([f(x) for x in xs])
    i = int(np.argmin(ys))
    a, b = xs[max(i - 1, 0)], xs[min(i + 1, grid - 1)]
    res = optimize.minimize_scalar(f, bounds=(a, b), method="bounded",
                                   options={"xatol": 1e-9 * max(1.0, abs(xs[i]))})
    if res.fun <= ys[i]:
        return float(res.x), float(res.fun)
    return float(xs[i]), float(ys[i])


def _profile_interval(prof: Callable[[float], float], x_hat: float, f_hat: float, lo: float,
                      hi: float, threshold: float):
    """Where the profile deviance 2(prof − f_hat) crosses ``threshold`` on each side of x_hat.

    Returns (lower, upper); a side that does not cross inside [lo, hi] gives lo or hi
    (the caller turns those into 0 or inf).
    """
    def g(x):
        return 2.0 * (prof(x) - f_hat) - threshold

    def side(edge):
        if abs(edge - x_hat) < 1e-12 or g(edge) < 0:
            return edge
        # walk out geometrically so the bracket stays tight (profiles are flat far out)
        step = 0.05 * (edge - x_hat) / abs(edge - x_hat)
        inner = x_hat
        while True:
            outer = x_hat + step
            if (outer - edge) * (edge - x_hat) >= 0:
                outer = edge
            if g(outer) >= 0:
                return float(optimize.brentq(g, inner, outer, xtol=1e-9, rtol=1e-10))
            if outer == edge:
                return edge
            inner, step = outer, step * 2.0

    return side(lo), side(hi)
