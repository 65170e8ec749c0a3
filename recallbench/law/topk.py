"""Top-1 against top-k recall: where each crosses 1/2, and how that moves with V.

The question (docs/theory.md, "The law", its top-k paragraph): exact (top-1) retrieval
from a linear associative memory costs a log factor that listwise (top-k) retrieval may
not, so the state a layer needs should grow with log V less for top-k.  Every record holds both
accuracies (``correct`` and ``correct_topk`` of ``train.top_k``), so one grid over
(V, N_f, D, N) measures both curves on the same trained models.

Coordinate.  Each run sits at the collapse variable x = √(N_eff·D/(a·N_f + N_eff))
(:func:`recallbench.law.fit.collapse_x`) with the paper's a = 5/4 of the trained linear
model on MQAR, held fixed: x² is the state product per fact, and where N_eff ≪ a·N_f a
different true a only rescales x², which cancels in the ratios between vocabularies.

Fits.  Each curve (one V, one metric, optionally one N_f) is fitted by maximum likelihood
as a probit in x, p = Φ(s·(x − c)); the crossing c is where recall is 1/2 and the
threshold is τ = c² (the N·D/(a·N_f + N) that recall 1/2 needs).  The slope s is free
because the Gaussian model's top-1 and top-k curves are not Φ(x − b) exactly (the k-th
largest of V − 1 normals is narrower than the largest), so a slope-1 fit would move the
crossing.  Intervals of c (hence τ) are profile-likelihood intervals with the
quasi-binomial dispersion, as in :mod:`recallbench.law.fit`.  The comparison between the
two vocabularies, R = τ(V₂)/τ(V₁) per metric and R_k − R_1, gets percentile bootstrap
intervals: runs are resampled with replacement within each (V, N_f) stratum, the same
resample for both metrics (they come from the same models).

Theory.  The Gaussian model of eq. 19 and its top-k extension
(:func:`recallbench.law.theory.topk_from_inverse_sigma`) give each metric's crossing
x*_k(V); its threshold grows roughly as x*² ≈ 2·log(V/k), so at a fixed k the *ratio*
τ(V₂)/τ(V₁) is larger for top-k than for top-1, while the *difference* τ(V₂) − τ(V₁) is
about the same: the model predicts no weakening of the log V term at fixed k.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Mapping

import numpy as np
from scipy import optimize, special, stats

from recallbench.law import fit, theory
from recallbench.law.scorer import unconverged

#: the paper's a of the trained linear model on MQAR, used for every run's x
PAPER_A = theory.A_TABLE[("linear", "mqar")]
LOG_SLOPE_BOUNDS = (math.log(0.05), math.log(50.0))
METRICS = ("top1", "topk")


def theory_crossing(vocab_size: float, top_k: int = 1, level: float = 0.5) -> float:
    """x at which the Gaussian model's top-k recall equals ``level`` (k = 1: eq. 19)."""
    if not 1 <= top_k < vocab_size:
        raise ValueError(f"top_k = {top_k} is not allowed: an integer in [1, V - 1 = {vocab_size - 1}]")
    if not float(top_k) / vocab_size < level < 1.0:
        raise ValueError(f"level = {level} is not allowed: must be in (k/V, 1)")

    def g(x):
        return theory.topk_from_inverse_sigma(x, vocab_size, top_k) - level

    hi = 4.0
    while g(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(g, 0.0, hi, xtol=1e-10))


@dataclasses.dataclass
class ThresholdFit:
    """p = Φ(slope·(x − crossing)) fitted to counts; threshold = crossing²."""

    crossing: float
    crossing_ci: tuple[float, float]
    slope: float
    threshold: float
    threshold_ci: tuple[float, float]
    level: float
    nll: float
    deviance: float
    dof: int
    dispersion: float
    n_points: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _checked(correct, total, x):
    k, n, x = fit._arrays(correct, total, x)
    if not (np.all(np.isfinite(x)) and np.all(x >= 0)):
        raise ValueError("x: every value must be a finite number >= 0")
    if np.any(n < 0) or np.any(k < 0) or np.any(k > n):
        raise ValueError("correct, total: need 0 <= correct <= total at every point")
    keep = n > 0
    k, n, x = k[keep], n[keep], x[keep]
    if len(np.unique(x)) < 2:
        raise ValueError("fit_threshold needs points with queries at 2 or more distinct x")
    return k, n, x


def _mle(k, n, x):
    """(crossing, log slope, nll, profile of the crossing, crossing range) of the probit."""
    c_range = (0.0, 2.0 * float(x.max()) + 2.0)

    def nll(c, log_s):
        z = math.exp(log_s) * (x - c)
        return fit._nll(k, n, special.log_ndtr(z), special.log_ndtr(-z))

    def best_slope(c):
        res = optimize.minimize_scalar(lambda ls: nll(c, ls), bounds=LOG_SLOPE_BOUNDS,
                                       method="bounded", options={"xatol": 1e-8})
        return float(res.x), float(res.fun)

    def prof(c):
        return best_slope(c)[1]

    c_hat, f_hat = fit._minimize_1d(prof, *c_range, grid=41)
    ls_hat, f2 = best_slope(c_hat)
    return c_hat, ls_hat, min(f_hat, f2), prof, c_range


def fit_threshold(correct, total, x, level: float = 0.95, overdispersion: bool = True) -> ThresholdFit:
    """Maximum-likelihood crossing c of p = Φ(s·(x − c)) with its profile-likelihood interval.

    A bound the data do not limit (every point on one side of 1/2, far from it) is 0 or
    ``inf``.  ValueError for counts that are not 0 <= correct <= total, a negative or
    non-finite x, or fewer than 2 distinct x with queries.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level = {level} is not allowed: must be in (0, 1)")
    k, n, x = _checked(correct, total, x)
    c_hat, ls_hat, f_hat, prof, (lo, hi) = _mle(k, n, x)
    deviance, dof, phi = fit._dispersion(f_hat, k, n, 2, overdispersion)
    thr = stats.chi2.ppf(level, 1) * phi
    c_lo, c_hi = fit._profile_interval(prof, c_hat, f_hat, lo, hi, thr)
    c_lo = 0.0 if c_lo <= lo else c_lo
    c_hi = math.inf if c_hi >= hi else c_hi
    return ThresholdFit(crossing=c_hat, crossing_ci=(c_lo, c_hi), slope=math.exp(ls_hat),
                        threshold=c_hat ** 2, threshold_ci=(c_lo ** 2, c_hi ** 2), level=level,
                        nll=f_hat, deviance=deviance, dof=dof, dispersion=phi, n_points=len(k))


# -- runs of a study -----------------------------------------------------------------

def study_rows(records: Iterable[Mapping], include_unconverged: bool = False
               ) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays (one entry per usable run) and counts of what was left out.

    Usable: an ok record with a config, ``correct``, ``correct_topk`` and ``total`` > 0,
    not cut by ``max_steps`` while improving (as the scorer's fits) unless
    ``include_unconverged`` (then such runs count, as accuracies at the run's step budget,
    and ``unconverged_used`` says how many).  The last record of a config hash wins.
    ValueError when runs disagree on ``top_k`` or none is usable.
    """
    latest: dict[str, Mapping] = {}
    for j, rec in enumerate(records):
        latest[str(rec.get("config_hash") or j)] = rec
    rows, skipped = [], {"failed": 0, "unconverged": 0, "no_topk": 0}
    for rec in latest.values():
        if rec.get("status", "ok") != "ok" or "config" not in rec:
            skipped["failed"] += 1
        elif rec.get("correct_topk") is None or not rec.get("total"):
            skipped["no_topk"] += 1
        elif unconverged(rec) and not include_unconverged:
            skipped["unconverged"] += 1
        else:
            rows.append(rec)
    if not rows:
        raise ValueError("no usable run: need ok, converged records with correct, correct_topk "
                         f"and total > 0 (left out: {skipped})" + _unconverged_hint(skipped))
    ks = sorted({int(r["top_k"]) for r in rows})
    if len(ks) != 1:
        raise ValueError(f"top_k: the runs use {ks[:5]}; a study needs one k")
    cfg = [(r["config"]["task"], r["config"]["model"]) for r in rows]
    out = {"vocab_size": [t["vocab_size"] for t, _ in cfg], "num_facts": [t["num_facts"] for t, _ in cfg],
           "d_model": [m["d_model"] for _, m in cfg], "d_state": [m["d_state"] for _, m in cfg],
           "n_layers": [m.get("n_layers", 1) for _, m in cfg],
           "total": [r["total"] for r in rows], "top1": [r["correct"] for r in rows],
           "topk": [r["correct_topk"] for r in rows]}
    arr = {key: np.asarray(v, float) for key, v in out.items()}
    arr["x"] = np.asarray(fit.collapse_x(arr["d_model"], arr["d_state"], arr["num_facts"], PAPER_A,
                                         arr["n_layers"]), float).reshape(-1)
    return arr, {"top_k": ks[0], "used": len(rows), "left_out": skipped,
                 "unconverged_used": sum(unconverged(r) for r in rows)}


def _unconverged_hint(left_out: Mapping) -> str:
    """What to do about runs left out as unconverged, if any were."""
    n = left_out.get("unconverged", 0)
    return (f"; {n} run(s) were left out as unconverged (cut by max_steps while still "
            "improving): pass --include-unconverged to use them" if n else "")


def _mask(rows, vocab_size, num_facts=None):
    m = rows["vocab_size"] == vocab_size
    return m if num_facts is None else m & (rows["num_facts"] == num_facts)


def _k_of(metric: str, top_k: int) -> int:
    return 1 if metric == "top1" else top_k


def theory_gap(rows: Mapping[str, np.ndarray], mask, metric: str, top_k: int) -> dict:
    """Measured minus the Gaussian model's recall (paper a) over the runs in ``mask``."""
    v = rows["vocab_size"][mask]
    pred = np.asarray(theory.topk_from_inverse_sigma(rows["x"][mask], v, _k_of(metric, top_k)))
    diff = rows[metric][mask] / rows["total"][mask] - pred.reshape(-1)
    return {"mean": float(diff.mean()), "mean_abs": float(np.abs(diff).mean()),
            "max_abs": float(np.abs(diff).max()), "n_points": int(diff.size)}


def _curve(rows, mask, metric, top_k, level) -> dict:
    v = float(rows["vocab_size"][mask][0])
    f = fit_threshold(rows[metric][mask], rows["total"][mask], rows["x"][mask], level)
    xs = theory_crossing(v, _k_of(metric, top_k))
    return {"vocab_size": v, "metric": metric, "k": _k_of(metric, top_k), "fit": f.to_dict(),
            "theory_crossing": xs, "theory_threshold": xs * xs}


def _bootstrap(rows, vocabs, n_boot: int, seed: int) -> tuple[dict[str, np.ndarray], int]:
    """Bootstrap draws of τ(V₂)/τ(V₁) and τ(V₂) − τ(V₁) per metric (paired resamples)."""
    rng = np.random.default_rng(seed)
    strata = [np.flatnonzero(_mask(rows, v, nf)) for v in vocabs
              for nf in np.unique(rows["num_facts"][_mask(rows, v)])]
    draws: dict[str, list] = {f"{q}_{m}": [] for q in ("ratio", "difference") for m in METRICS}
    failed = 0
    for _ in range(n_boot):
        idx = np.concatenate([rng.choice(s, size=len(s), replace=True) for s in strata])
        try:
            tau = {(v, m): _mle(*_checked(rows[m][idx][rows["vocab_size"][idx] == v],
                                          rows["total"][idx][rows["vocab_size"][idx] == v],
                                          rows["x"][idx][rows["vocab_size"][idx] == v]))[0] ** 2
                   for v in vocabs for m in METRICS}
        except ValueError:  # a resample with one distinct x in a curve
            failed += 1
            continue
        for m in METRICS:
            lo, hi = tau[(vocabs[0], m)], tau[(vocabs[1], m)]
            draws[f"ratio_{m}"].append(hi / lo if lo > 0 else math.inf)
            draws[f"difference_{m}"].append(hi - lo)
    return {key: np.asarray(v, float) for key, v in draws.items()}, failed


def _interval(draws: np.ndarray, level: float) -> tuple[float, float]:
    if draws.size == 0:
        return (math.nan, math.nan)
    q = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(draws, [q, 100.0 - q])
    return (float(lo), float(hi))


def _comparison(curves, draws, vocabs, level) -> dict:
    by = {(c["vocab_size"], c["metric"]): c for c in curves}
    out: dict = {"log_v_ratio": math.log(vocabs[1]) / math.log(vocabs[0])}
    for m in METRICS:
        lo, hi = by[(vocabs[0], m)], by[(vocabs[1], m)]
        t_lo, t_hi = lo["fit"]["threshold"], hi["fit"]["threshold"]
        out[m] = {"ratio": t_hi / t_lo if t_lo > 0 else math.inf,
                  "ratio_ci": _interval(draws[f"ratio_{m}"], level),
                  "theory_ratio": hi["theory_threshold"] / lo["theory_threshold"],
                  "difference": t_hi - t_lo,
                  "difference_ci": _interval(draws[f"difference_{m}"], level),
                  "theory_difference": hi["theory_threshold"] - lo["theory_threshold"]}
    for q in ("ratio", "difference"):
        gap = draws[f"{q}_topk"] - draws[f"{q}_top1"]
        out[f"{q}_gap"] = {"value": out["topk"][q] - out["top1"][q], "ci": _interval(gap, level),
                           "theory": out["topk"][f"theory_{q}"] - out["top1"][f"theory_{q}"]}
    return out


def verdict(comparison: Mapping, top_k: int, level: float = 0.95) -> str:
    """One plain sentence on R_k − R_1 (threshold ratios between the two V), with its interval."""
    g = comparison["ratio_gap"]
    lo, hi = g["ci"]
    said = (f"R_top{top_k} - R_top1 = {g['value']:+.2f} [{lo:+.2f}, {hi:+.2f}] "
            f"({level:.0%} bootstrap; the Gaussian model at fixed k: {g['theory']:+.2f})")
    if hi < 0:
        return f"top-{top_k}'s threshold grows with V less than top-1's: the log V term weakens; {said}"
    if lo > 0:
        return (f"top-{top_k}'s threshold grows with V more than top-1's, in ratio: no weakening "
                f"of the log V term at fixed k; {said}")
    return f"not resolved: the data cannot tell whether top-{top_k}'s log V term is weaker; {said}"


def analyse(records: Iterable[Mapping], n_boot: int = 200, seed: int = 0, level: float = 0.95,
            include_unconverged: bool = False) -> dict:
    """The whole study: threshold fits per (V, metric) and per (V, N_f, metric), their
    theory values, the comparison between the two vocabularies and the verdict."""
    if not 0 <= n_boot <= 100_000:
        raise ValueError(f"n_boot = {n_boot} is not allowed: an integer in [0, 100000]")
    rows, info = study_rows(records, include_unconverged)
    vocabs = sorted(float(v) for v in np.unique(rows["vocab_size"]))
    if len(vocabs) != 2:
        raise ValueError(f"vocab_size: the runs have {len(vocabs)} values "
                         f"{[int(v) for v in vocabs[:5]]}; the study needs exactly 2"
                         + _unconverged_hint(info["left_out"]))
    k = info["top_k"]
    curves = []
    for v in vocabs:
        for m in METRICS:
            try:
                c = _curve(rows, _mask(rows, v), m, k, level)
            except ValueError as exc:  # fewer than 2 distinct x at this V
                hint = _unconverged_hint(info["left_out"])
                if not hint:
                    raise
                raise ValueError(f"V = {v:g}: {int(_mask(rows, v).sum())} usable run(s), too "
                                 f"few to fit ({exc}){hint}") from None
            c["theory_gap"] = theory_gap(rows, _mask(rows, v), m, k)
            curves.append(c)
    by_facts = []
    for v in vocabs:
        for nf in np.unique(rows["num_facts"][_mask(rows, v)]):
            for m in METRICS:
                try:
                    c = _curve(rows, _mask(rows, v, nf), m, k, level)
                except ValueError:  # one distinct x at this N_f
                    continue
                by_facts.append({"num_facts": float(nf), **c})
    draws, failed = _bootstrap(rows, vocabs, n_boot, seed)
    comp = _comparison(curves, draws, vocabs, level)
    return {**info, "a": PAPER_A, "level": level, "vocab_sizes": vocabs, "curves": curves,
            "by_num_facts": by_facts, "comparison": comp,
            "bootstrap": {"n": n_boot, "failed": failed, "seed": seed,
                          "method": "percentile; runs resampled within (V, N_f), paired across metrics"},
            "verdict": verdict(comp, k, level)}
