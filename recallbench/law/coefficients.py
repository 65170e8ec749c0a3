"""The coefficient a of the recall law, by model kind and task family (Rem 4.3).

σ² = a·N_f/(N·D) + 1/D (Thm 4.2, :mod:`recallbench.law.theory`): a is the only constant
of the law that depends on what is measured.  The paper gives it for three model kinds
(``MODEL_KINDS``) and two task families (``TASK_FAMILIES``); plugins declare theirs
(``Adapter.law_kind``, ``Task.law_family``) and the law reads a from :data:`A_TABLE`.
"""
from __future__ import annotations

MODEL_KINDS = ("designed", "linear", "full")
TASK_FAMILIES = ("ar", "mqar")

#: The coefficient a of σ² = a·N_f/(N·D) + 1/D as used in the paper's code (Rem 4.3).
#: "designed": fixed JL weights (Alg. 1 with the hashing circuit of Thm 3.2);
#: "linear": the simplified linear Mamba, trained; "full": full Mamba, trained (heuristic:
#: half of linear).  Tasks pick the column by their declared ``law_family`` (repeated-key
#: MQAR declares "mqar").
A_TABLE: dict[tuple[str, str], float] = {
    ("designed", "ar"): 2.0,
    ("designed", "mqar"): 3.0,
    ("linear", "ar"): 1.0,
    ("linear", "mqar"): 5.0 / 4.0,
    ("full", "ar"): 0.5,
    ("full", "mqar"): 5.0 / 8.0,
}

#: The model kinds whose N and D are the law's own N and D, so that ``recallbench score``
#: fits the collapse for them by default: the designed model and the simplified linear
#: Mamba.  Full Mamba's a is a heuristic (half of linear), and its expansion, convolution
#: and gates make its N and D the law's only loosely: it gets the table's curve, no
#: automatic collapse fit.
COLLAPSE_KINDS = frozenset({"designed", "linear"})


def coefficient_a(model_kind: str, family: str) -> float:
    """The paper's a for a model kind (designed, linear, full) and a task family (ar, mqar),
    Rem 4.3.  Plugins declare both (``Adapter.law_kind``, ``Task.law_family``)."""
    if model_kind not in MODEL_KINDS:
        raise ValueError(f"model_kind = {model_kind!r} is not allowed: one of {', '.join(MODEL_KINDS)}")
    check_family(family)
    return A_TABLE[(model_kind, family)]


def check_family(family: str) -> None:
    """ValueError unless ``family`` is a task family of the law (``TASK_FAMILIES``)."""
    if family not in TASK_FAMILIES:
        raise ValueError(f"family = {family!r} is not allowed: one of {', '.join(TASK_FAMILIES)}")


def a_implied(ratio: tuple[float, float, float],
              reference: tuple[float, float, float] | None = None, family: str = "mqar",
              z: float = 1.959964) -> tuple[float, float, float]:
    """The coefficient a a measured card implies, (value, lo, hi).

    A model whose S_eff/S is r recalls like the linear reference with r times its state, so
    its a is a_linear / r (Rem 4.3: σ² grows with a·N_f/S).  ``ratio`` = (r, lo, hi), the
    card's S_eff/S and 95% interval.  With ``reference`` (the linear reference's own card on
    the same protocol, (r_ref, lo, hi)) a = a_linear · r_ref / r: the protocol's shortfall of
    the reference cancels.  Two independent cards' intervals are combined on the log scale,
    each read as ±z standard errors (a delta-method interval)."""
    a_lin = coefficient_a("linear", family)
    r, lo, hi = (float(x) for x in ratio)
    if reference is None:
        return a_lin / r, a_lin / hi, a_lin / lo
    import math

    q, qlo, qhi = (float(x) for x in reference)
    se = math.hypot(math.log(hi / lo), math.log(qhi / qlo)) / (2 * z)
    value = a_lin * q / r
    return value, value * math.exp(-z * se), value * math.exp(z * se)
