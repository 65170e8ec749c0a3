"""The extended recall law (an extension, not the paper's law): a guessing floor.

The paper's collapse (Rem 4.3, fitted by :func:`recallbench.law.fit.fit_collapse`) is
p = Φ(x − b), x = √(Λ·N·D/(a·N_f + Λ·N)); as x → 0 it falls to Φ(−b), about 0.002 at
V = 512.  The extension adds one parameter, a floor f ∈ [0, 1):

    p = f + (1 − f)·Φ(x − b)

a query is answered by the read-out the law describes with probability Φ(x − b); when
the read-out fails, the model still answers right with probability f (a guess among the
values it saw: f = 1/N_f for a bag of values, 1/V_v for a blind guess).  f = 0 is the
paper's law, so the two are nested and f = 0 is tested by a likelihood ratio
(docs/theory.md, "The extended law"):

* statistic 2·Δℓ = 2·(nll_paper − nll_extended) ≥ 0.  Like every fit of
  :mod:`recallbench.law.fit` this one is quasi-binomial, so the test is the
  quasi-likelihood F test: F = 2·Δℓ/φ̂ against F(1, points − 3), with φ̂ = deviance/dof of
  the extended (larger) model; with ``overdispersion=False``, 2·Δℓ against χ²₁.
* f = 0 lies on the edge of the parameter range, so under the paper's law the statistic
  is 0 half of the time (Self & Liang 1987): the p-value is half the upper tail
  (1 when the statistic is 0), which is the one-sided test of f > 0.

Intervals are profile likelihood, threshold χ²₁(level)·φ with φ = max(1, deviance/dof),
as in :mod:`recallbench.law.fit`.
AIC is the binomial one (with the log binomial coefficients); with φ > 1 it is not
meaningful and QAIC = −2ℓ/φ + 2·(parameters + 1), φ of the extended model for both
laws, is the one to compare (Burnham & Anderson).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import optimize, special, stats

from recallbench.law import fit

FORM = "p = f + (1 - f) Phi(sqrt(Lambda N D / (a N_f + Lambda N)) - b)"
NOTE = "extension, not the paper's law"
FLOOR_MAX = 0.99
B_BOUNDS = (-20.0, 60.0)
N_WORST = 3
_LA_GRID = np.linspace(*fit.LOG_A_BOUNDS, 13)
_B_GRID = np.linspace(-2.0, 8.0, 21)
_F_GRID = np.array([0.0, 0.003, 0.01, 0.03, 0.1, 0.3])


@dataclasses.dataclass
class _Data:
    k: np.ndarray
    n: np.ndarray
    n_eff: np.ndarray  # Λ·N
    d: np.ndarray
    nf: np.ndarray
    scale: float  # Σ n: the objective is divided by it, for the optimizer's sake
    where: list  # each point's cell: D, N, Λ, N_f

    def x(self, log_a):
        la = np.asarray(log_a, float)[..., None]
        return np.sqrt(self.n_eff * self.d / (np.exp(la) * self.nf + self.n_eff))


def _data(correct, total, d_model, d_state, num_facts, vocab_size, n_layers) -> _Data:
    k, n, d, ns, nf, v, lam = fit._arrays(correct, total, d_model, d_state, num_facts, vocab_size,
                                          n_layers)
    keep = n > 0
    k, n, d, ns, nf, v, lam = (x[keep] for x in (k, n, d, ns, nf, v, lam))
    if len(np.unique(v)) != 1:
        raise ValueError("the extended fit needs points of one vocab_size (b depends on V)")
    if len(set(zip(lam * ns, d, nf))) < 3:
        raise ValueError("the extended fit needs points at 3 or more distinct (Λ·N, D, N_f): "
                         "with fewer, a, b and the floor are not identified")
    where = [{key: int(v) if float(v).is_integer() else float(v) for key, v in
              zip(("d_model", "d_state", "n_layers", "num_facts"), cell)}
             for cell in zip(d, ns, lam, nf)]
    return _Data(k, n, lam * ns, d, nf, float(n.sum()), where)


def _log_pq(data: _Data, la, b, f):
    """log p and log(1 − p) of the floored law; la, b, f broadcast against the points."""
    z = data.x(la) - np.asarray(b, float)[..., None]
    f = np.asarray(f, float)[..., None]
    with np.errstate(divide="ignore"):
        log_p = np.logaddexp(np.log(f), np.log1p(-f) + special.log_ndtr(z))
    return z, log_p, np.log1p(-f) + special.log_ndtr(-z)


def _nll(data: _Data, la, b, f):
    """Binomial negative log-likelihood (no log C(n, k)); vectorized over (la, b, f)."""
    _, log_p, log_q = _log_pq(data, la, b, f)
    return -np.sum(data.k * log_p + (data.n - data.k) * log_q, axis=-1)


def _nll_grad(theta, data: _Data):
    """nll / Σn and its gradient in (log a, b, f)."""
    la, b, f = theta
    z, log_p, log_q = _log_pq(data, la, b, f)
    k, m = data.k, data.n - data.k
    log_phi = -0.5 * z * z - 0.5 * math.log(2 * math.pi)
    log_tail = special.log_ndtr(-z)  # log(1 − Φ(z))
    dz = k * np.exp(math.log1p(-f) + log_phi - log_p) - m * np.exp(log_phi - log_tail)
    x = z + b
    an = math.exp(la) * data.nf
    dx_dla = -0.5 * x * an / (an + data.n_eff)
    df = np.sum(k * np.exp(log_tail - log_p)) - m.sum() / (1.0 - f)
    grad = -np.array([np.sum(dz * dx_dla), -np.sum(dz), df]) / data.scale
    value = -float(np.sum(k * log_p + m * log_q)) / data.scale
    return value, grad


def _bounds(free_f: bool):
    return [fit.LOG_A_BOUNDS, B_BOUNDS, (0.0, FLOOR_MAX if free_f else 0.0)]


def _polish(data: _Data, start, bounds, ftol: float = 1e-14):
    """SLSQP from ``start`` within ``bounds``: (theta, nll).

    (Not L-BFGS-B: its small LAPACK calls run OpenBLAS's threads, many times slower on a
    loaded machine for a 3-parameter problem.)
    """
    lo, hi = np.array(bounds, float).T
    res = optimize.minimize(_nll_grad, np.clip(np.asarray(start, float), lo, hi), args=(data,),
                            jac=True, method="SLSQP", bounds=bounds,
                            options={"ftol": ftol, "maxiter": 200})
    theta = np.clip(np.asarray(res.x, float), lo, hi)
    return theta, float(_nll(data, *theta))


def _mle(data: _Data, floor: bool, starts: Sequence = (), n_best: int = 1):
    """Maximum likelihood of the paper's law (floor=False: f = 0) or the floored law.

    A vectorized grid over (log a, b, f) picks the starts, SLSQP polishes the best
    ``n_best`` and any ``starts`` given; returns (theta, nll).
    """
    fs = _F_GRID if floor else _F_GRID[:1]
    la, b, f = np.meshgrid(_LA_GRID, _B_GRID, fs, indexing="ij")
    grid = _nll(data, la.ravel(), b.ravel(), f.ravel())
    best = np.argsort(grid)[:n_best]
    cands = [(la.ravel()[i], b.ravel()[i], f.ravel()[i]) for i in best] + list(starts)
    return min((_polish(data, s, _bounds(floor)) for s in cands), key=lambda r: r[1])


def _profile(data: _Data, theta_hat, index: int, level: float, phi: float, nll_hat: float):
    """Profile-likelihood interval of parameter ``index`` (0 log a, 1 b, 2 f)."""
    bounds = _bounds(True)
    seen = [np.asarray(theta_hat, float)]

    def prof(value):
        fixed = list(bounds)
        fixed[index] = (value, value)
        near = min(seen, key=lambda t: abs(t[index] - value))  # warm start: the nearest
        theta, nll = _polish(data, np.where(np.arange(3) == index, value, near), fixed, 1e-11)
        seen.append(theta)
        return nll

    lo, hi = bounds[index] if index != 1 else (theta_hat[1] - 30.0, theta_hat[1] + 30.0)
    thr = stats.chi2.ppf(level, 1) * phi
    return fit._profile_interval(prof, float(theta_hat[index]), nll_hat, lo, hi, thr), (lo, hi)


def _worst(data: _Data, theta, phi: float) -> list[dict]:
    """The N_WORST largest |standardized residual| (k − n·p)/√(φ·n·p·(1 − p)), by cell."""
    _, log_p, log_q = _log_pq(data, *theta)
    p, q = np.exp(log_p), np.exp(log_q)
    r = (data.k - data.n * p) / np.sqrt(phi * data.n * np.maximum(p * q, 1e-300))
    out = []
    for i in np.argsort(-np.abs(r))[:N_WORST]:
        out.append({**data.where[i], "accuracy": float(data.k[i] / data.n[i]),
                    "predicted": float(p[i]), "residual": float(r[i])})
    return out


def lr_test(nll_paper: float, nll_extended: float, deviance: float, dof: int,
            overdispersion: bool = True) -> dict:
    """The likelihood-ratio test of f = 0 (see the module doc): statistic, p-value, φ.

    The F test divides by the estimate deviance/dof itself, not by fit.py's max(1, ·): the
    F(1, dof) reference already allows for the estimate's own noise, and clamping it at 1
    makes the test conservative on binomial data (4.3 % false rejections at 5 % instead of
    5.5 %, 1000 simulated grids).
    """
    lr = max(0.0, 2.0 * (nll_paper - nll_extended))
    if overdispersion and dof > 0:
        raw = max(deviance / dof, 1e-12)
        stat = lr / raw
        p = 0.5 * float(stats.f.sf(stat, 1, dof)) if stat > 0 else 1.0
        return {"kind": "F", "lr": lr, "statistic": stat, "df": [1, dof], "p_value": p,
                "dispersion": raw}
    p = 0.5 * float(stats.chi2.sf(lr, 1)) if lr > 0 else 1.0
    return {"kind": "chi2", "lr": lr, "statistic": lr, "df": [1], "p_value": p, "dispersion": 1.0}


def _test_parts(data: _Data, overdispersion: bool, paper: Mapping | None = None):
    theta0, nll0 = _mle(data, floor=False)
    if paper is not None and paper["nll"] < nll0:  # the caller's fit of the paper's law
        theta0, nll0 = np.array([math.log(paper["a"]), paper["b"], 0.0]), float(paper["nll"])
    theta1, nll1 = _mle(data, floor=True, starts=[theta0])
    if nll1 > nll0:  # the paper's optimum is a point of the extended law (f = 0)
        theta1, nll1 = theta0, nll0
    deviance = 2.0 * (nll1 - fit._saturated_nll(data.k, data.n))
    dof = len(data.k) - 3
    return theta0, nll0, theta1, nll1, lr_test(nll0, nll1, deviance, dof, overdispersion)


def floor_test(correct, total, d_model, d_state, num_facts, vocab_size, n_layers=1,
               overdispersion: bool = True) -> dict:
    """Only the test of f = 0 (no intervals): fast, for simulations of its calibration."""
    data = _data(correct, total, d_model, d_state, num_facts, vocab_size, n_layers)
    return _test_parts(data, overdispersion)[4]


def _log_lik(nll: float, data: _Data) -> float:
    """The binomial log-likelihood with its constant Σ log C(n, k)."""
    const = special.gammaln(data.n + 1) - special.gammaln(data.k + 1) - special.gammaln(
        data.n - data.k + 1)
    return float(np.sum(const)) - nll


def _criteria(log_lik: float, n_params: int, phi: float) -> dict:
    return {"aic": -2.0 * log_lik + 2 * n_params,
            "qaic": -2.0 * log_lik / phi + 2 * (n_params + 1)}


def _ci(interval, edges, transform=float):
    lo, hi = interval
    return [None if lo <= edges[0] else transform(lo), None if hi >= edges[1] else transform(hi)]


def fit_extended(correct, total, d_model, d_state, num_facts, vocab_size, n_layers=1,
                 level: float = 0.95, overdispersion: bool = True,
                 paper: Mapping | None = None) -> dict:
    """The paper's collapse and the floored law on the same counts, and the test of f = 0.

    ``paper`` is the paper's fit (:meth:`recallbench.law.fit.CollapseFit.to_dict`) when the
    caller has it (its parameters and intervals are reported as they are); otherwise it
    is fitted here.  Returns a JSON-ready dict: ``paper`` and ``extended`` (parameters,
    intervals (null: unbounded), nll, log-likelihood, dispersion, AIC, QAIC, worst cells)
    and ``test``.
    """
    args = (correct, total, d_model, d_state, num_facts, vocab_size, n_layers)
    data = _data(*args)
    if paper is None:
        paper = fit.fit_collapse(*args, model_kind=None, level=level,
                                 overdispersion=overdispersion).to_dict()
    theta0, nll0, theta1, nll1, test = _test_parts(data, overdispersion, paper)
    phi = max(1.0, test["dispersion"])  # the intervals' φ, as in recallbench.law.fit
    ext: dict[str, Any] = {"a": math.exp(theta1[0]), "b": float(theta1[1]), "floor": float(theta1[2])}
    (a_ci, a_edges), (b_ci, b_edges), (f_ci, f_edges) = (
        _profile(data, theta1, i, level, phi, nll1) for i in range(3))
    ext.update(a_ci=_ci(a_ci, a_edges, math.exp), b_ci=_ci(b_ci, b_edges),
               floor_ci=[f_ci[0], None if f_ci[1] >= f_edges[1] else f_ci[1]],
               nll=nll1, log_lik=_log_lik(nll1, data), dispersion=phi, n_params=3,
               **_criteria(_log_lik(nll1, data), 3, phi), worst=_worst(data, theta1, phi))
    ll0 = _log_lik(nll0, data)
    par = {"a": paper["a"], "a_ci": list(paper["a_ci"]), "b": paper["b"],
           "b_ci": list(paper["b_ci"]), "nll": nll0, "log_lik": ll0,
           "dispersion": paper["dispersion"], "n_params": 2, **_criteria(ll0, 2, phi),
           "worst": _worst(data, (math.log(paper["a"]), paper["b"], 0.0), paper["dispersion"])}
    return {"note": NOTE, "form": FORM, "level": level, "n_points": len(data.k),
            "paper": par, "extended": ext, "test": test}


def group_fits(cells: Sequence[Mapping], collapse: Mapping, level: float = 0.95) -> dict:
    """The extended fit of a scored group, per view of its collapse fit (best, mean)."""
    out = {}
    for view, col in collapse.items():
        if "error" in col:
            out[view] = {"label": col.get("label", view), "error": col["error"]}
            continue
        arr = [np.array([c[view][key] for c in cells], float) for key in ("correct", "total")]
        sizes = [np.array([c[key] for c in cells], float)
                 for key in ("d_model", "d_state", "num_facts", "vocab_size", "n_layers")]
        try:
            out[view] = {"label": col.get("label", view),
                         **fit_extended(*arr, *sizes, level=level, paper=col)}
        except ValueError as exc:
            out[view] = {"label": col.get("label", view), "error": str(exc)}
    return out
