"""Eq. 19 and its top-k extension, by quadrature: (p, 1 − p) of the Gaussian model.

The read-out of Thm 4.2 is N(1, σ²) at the right value coordinate and N(0, σ²) at each of
the V − 1 others; recall succeeds when the right coordinate is the largest (top-k: among
the k largest).  :func:`_quadrature` integrates that probability and its complement, both
to full relative precision, with composite Gauss-Legendre panels placed around the step
of the wrong read-outs' maximum, the same number of nodes for every point of a vectorized
call.  :mod:`recallbench.law.theory` computes the law's recall with it (``form="eq19"``).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special

_LOG_TINY = -50.0  # e^-50 ≈ 2e-22: what the quadrature window may drop
_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)
# panels per segment of the window: left of the transition, the transition, right of it
_PANELS = (6, 28, 12)


def _segment(lo, hi, panels):
    """Composite 8-point Gauss-Legendre nodes and weights on [lo, hi] (arrays, broadcast)."""
    t = np.linspace(0.0, 1.0, panels + 1)
    edges = lo[..., None] + (hi - lo)[..., None] * t
    half = 0.5 * (edges[..., 1:] - edges[..., :-1])
    mid = 0.5 * (edges[..., 1:] + edges[..., :-1])
    nodes = mid[..., None] + half[..., None] * _GL_X
    weights = half[..., None] * _GL_W
    shape = lo.shape + (panels * len(_GL_X),)
    return nodes.reshape(shape), weights.reshape(shape)


def _max_cdf(y, n, k):
    """(F(y), 1 − F(y)): P(fewer than k of n standard normals exceed y), and its complement.

    k = 1: F = Φ(y)^n in log space (eq. 19).  k > 1: the binomial CDF
    P(Binom(n, Φ̄(y)) ≤ k − 1) as a regularized incomplete beta (``bdtr``/``bdtrc``).
    """
    if np.all(k == 1):
        log_f = n * special.log_ndtr(y)
        return np.exp(log_f), -np.expm1(log_f)
    y, n, k = np.broadcast_arrays(y, n, k)
    ni = np.rint(n).astype(np.int64)
    ki = np.rint(k).astype(np.int64) - 1
    q = special.ndtr(-y)
    always = ki >= ni
    f = np.where(always, 1.0, special.bdtr(np.minimum(ki, ni), ni, q))
    f_c = np.where(always, 0.0, special.bdtrc(np.minimum(ki, ni), ni, q))
    return f, f_c


def _quadrature(inv_sig, vocab_size, top_k):
    """(p, 1 − p) of the Gaussian model, both to full relative precision.

    With x = 1 + σz the integrand of eq. 19 becomes φ(z)·F(z + s), s = 1/σ, where F is
    the CDF of the largest of the V − 1 wrong read-outs (for top-k: of the k-th largest,
    F(y) = P(Binom(V−1, Φ̄(y)) ≤ k − 1)).  F is a step of width ≈ 1/√(2 log V) at its
    median y_med, and negligible (< e^-50) below y_lo; both are placed with the Poisson
    approximation of the binomial count.  The window [max(y_lo − s, −12), 12] is split
    into three segments, with the fine one (width 7, panels of 0.25) over the step, and
    each segment gets fixed Gauss-Legendre panels, so every point of a vectorized call
    has the same number of nodes.  The rest of the real line holds less than e^-50 of
    p, and of 1 − p what :math:`Φ(z_lo)(1 − F(z_lo + s))` accounts for.
    """
    s, v, k = np.broadcast_arrays(np.asarray(inv_sig, float), np.asarray(vocab_size, float),
                                  np.asarray(top_k, float))
    n = v - 1.0  # wrong coordinates
    lam_lo = special.pdtri(k - 1, math.exp(_LOG_TINY))
    lam_med = special.pdtri(k - 1, 0.5)
    with np.errstate(divide="ignore", invalid="ignore"):
        y_lo = np.where(lam_lo < n, -special.ndtri(np.minimum(lam_lo / n, 1.0)), -np.inf)
        y_med = -special.ndtri(np.clip(lam_med / n, 1e-300, 0.5))
    z_lo = np.clip(y_lo - s, -12.0, None)
    z_hi = np.maximum(12.0, z_lo + 12.0)
    a1 = np.clip(y_med - s - 3.0, z_lo, z_hi)
    a2 = np.clip(y_med - s + 4.0, z_lo, z_hi)
    segs = [_segment(lo, hi, m) for (lo, hi), m in zip(((z_lo, a1), (a1, a2), (a2, z_hi)), _PANELS)]
    z = np.concatenate([g[0] for g in segs], axis=-1)
    w = np.concatenate([g[1] for g in segs], axis=-1)
    log_phi = -0.5 * z * z - 0.5 * math.log(2.0 * math.pi)
    f, f_c = _max_cdf(z + s[..., None], n[..., None], k[..., None])
    phi = np.exp(log_phi)
    p = np.sum(w * phi * f, axis=-1)
    f_lo, _ = _max_cdf(z_lo + s, n, k)
    p_fail = np.sum(w * phi * f_c, axis=-1) + special.ndtr(z_lo) * (1.0 - f_lo)
    return np.clip(p, 0.0, 1.0), np.clip(p_fail, 0.0, 1.0)
