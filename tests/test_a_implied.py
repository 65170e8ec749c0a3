"""The coefficient a a card implies (``law.coefficients.a_implied``): the law's own ratio
for each model kind, and the coverage of the two-card interval by simulation."""
import math

import numpy as np
import pytest

from recallbench.law.coefficients import A_TABLE, a_implied


@pytest.mark.parametrize("kind", ["designed", "linear", "full"])
def test_a_model_at_its_own_ratio_reads_its_own_a(kind):
    """S_eff/S of a model of kind k is a_linear / a_k (docs/theory.md); reading it back gives
    a_k, and the interval is the ratio's interval mapped through a_linear / r."""
    r = A_TABLE[("linear", "mqar")] / A_TABLE[(kind, "mqar")]
    value, lo, hi = a_implied((r, 0.9 * r, 1.1 * r))
    assert value == pytest.approx(A_TABLE[(kind, "mqar")])
    assert lo == pytest.approx(value / 1.1) and hi == pytest.approx(value / 0.9)


def test_against_the_reference_the_shortfall_cancels_and_the_interval_covers():
    """A protocol that reads the linear reference at 1.2 reads a full model at 2.4; the
    interval from two independent cards (log-normal estimates) covers the truth ~95%."""
    value, _, _ = a_implied((2.4, 2.2, 2.6), reference=(1.2, 1.1, 1.3))
    assert value == pytest.approx(5 / 8)
    rng = np.random.default_rng(3)
    se_m, se_r, z, n, hits = 0.12, 0.05, 1.959964, 4000, 0
    for em, er in rng.standard_normal((n, 2)):
        rm, rr = 2.4 * math.exp(se_m * em), 1.2 * math.exp(se_r * er)
        v, lo, hi = a_implied((rm, rm * math.exp(-z * se_m), rm * math.exp(z * se_m)),
                              reference=(rr, rr * math.exp(-z * se_r), rr * math.exp(z * se_r)))
        hits += lo <= 5 / 8 <= hi
    assert abs(hits / n - 0.95) < 4 * math.sqrt(0.95 * 0.05 / n)
