"""Lem 4.5 (the Fano bound) against measurements and fitted laws.

* :func:`fano_check`: does one measured accuracy need more bits than the state holds?
  (a leak or a bug, never a win);
* :func:`capacity_report`: the capacity N_f*(δ) of a fitted linear reference law, and the
  Fano minimum of bits at that capacity beside the bits the state holds.

Symbols as in :mod:`recallbench.law.theory`.
"""
from __future__ import annotations

import dataclasses
import math

from recallbench.law import theory
from recallbench.law.binomial import binomial_interval


@dataclasses.dataclass
class FanoCheck:
    """Lem 4.5 against one measurement (see :func:`fano_check`)."""

    accuracy_lower: float  # Clopper-Pearson lower bound of the accuracy
    implied_bits: float  # (accuracy_lower)·info_bits − 1: what recall at that rate needs
    state_bits_total: float  # b·S: what the state can hold
    impossible: bool


def fano_check(correct, total, state_size, state_bits, info_bits, level: float = 0.95) -> FanoCheck:
    """Does the measured accuracy need more bits than the state holds?

    Lem 4.5: recall with probability 1 − δ needs b·S ≥ (1 − δ)·N_f·log2(V_v) − 1.  With
    1 − δ set to the accuracy's lower confidence bound and N_f·log2(V_v) = ``info_bits``
    (what the queries ask for), a measurement with
    (accuracy_lower)·info_bits − 1 > b·S is impossible for an honest fixed-state model: it
    points at a leak (the answer reachable without the state) or a bug.
    """
    lo, _ = binomial_interval(correct, total, level)
    implied = float(lo) * float(info_bits) - 1.0
    capacity_bits = float(state_size) * float(state_bits)
    return FanoCheck(float(lo), implied, capacity_bits, implied > capacity_bits)


@dataclasses.dataclass
class CapacityReport:
    """Capacity of a fitted law and the Fano bound at that capacity."""

    delta: float
    capacity: float  # N_f*(δ): largest N_f recalled with probability ≥ 1 − δ (continuous)
    fano_min_bits: float  # (1 − δ)·N_f*·log2(V/2) − 1, or 0 when that is negative
    state_bits_total: float | None  # b·S, None when the state grows with L
    bits_ratio: float | None  # b·S / Fano minimum (None when S is unknown or the minimum is 0 or inf)


def capacity_report(d_model, n_eff, vocab_size, family: str = "mqar", state_size=None,
                    state_bits: int = 32, delta: float = 0.01, form: str = "eq19",
                    a: float | None = None) -> CapacityReport:
    """N_f*(δ) of the linear reference law at (D, N_eff) and the Fano minimum there.

    N_f* = N_eff·(D − s*²)/(a·s*²) with s* the 1/σ reaching 1 − δ (``theory.capacity``);
    Fano minimum (Lem 4.5) = (1 − δ)·N_f*·log2(V/2) − 1; ratio = b·S / Fano minimum, how
    many times the information the demonstrated capacity needs the state could hold.
    """
    if a is None:
        a = theory.coefficient_a("linear", family)
    if math.isinf(n_eff):
        cap = math.inf
    else:
        cap = float(theory.capacity(d_model, n_eff, vocab_size, a, delta, form))
    cap = max(cap, 0.0) + 0.0
    fano = max(0.0, float(theory.fano_min_bits(cap, vocab_size, delta))) if math.isfinite(cap) else math.inf
    bits = None if state_size is None else float(state_size) * float(state_bits)
    ratio = None
    if bits is not None and 0 < fano < math.inf:
        ratio = bits / fano
    return CapacityReport(delta, cap, fano, bits, ratio)
