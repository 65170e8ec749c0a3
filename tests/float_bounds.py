"""Float32 parity bounds that come from the operation, not from the host.

A float32 result is compared with the same computation run in float64, and the gap must stay
within what float32 rounding can do to *this* computation:

    max|y32 − y64|  ≤  C · max|δy|,   δy = f64(x ⊙ (1 + eps32·s)) − f64(x),

per output tensor, where x are all the inputs and parameters, s is a random ±1 sign per element
and the float64 run is the reference.  max|δy| is the operation's condition number at x,
measured: eps32 · cond · |y|, the change that a one-ulp relative error in every input makes.
Cancellation (a gradient whose terms nearly sum to zero), strong decays and long sums all
enlarge δy exactly where they enlarge float32's error, and nothing here depends on which
instruction set the host's float32 kernels use.

C covers what an input perturbation does not model.  A float32 implementation rounds once per
elementary stage (projection, exp, product, sum, norm), and each stage's round-off, carried
through what follows, is about one input round-off (eps32 is twice the unit round-off of a
stage); and along a recurrence of T steps the random-sign perturbations add in quadrature
(√T) where round-offs can add coherently (T): up to √T ≈ 8 more at the T = 64 the tests run.
C = 16 covers both; measured, the float32 errors sit at 0.05 to 0.5 of C·max|δy| (the most,
~0.5, on a 64-step delta-rule state gradient with the non-vectorised kernels).  A wrong
computation (a dropped term, a missing decay) is off by O(|y|), orders of magnitude beyond
C·eps32·cond for the well-conditioned inputs the tests draw.
"""
from __future__ import annotations

import types
from contextlib import contextmanager
from typing import Callable, Sequence

import pytest
import torch

EPS32 = torch.finfo(torch.float32).eps  # 2**-23
EPS64 = torch.finfo(torch.float64).eps  # 2**-52
DRAWS = 3  # random sign patterns; the bound takes the largest change seen
C = 16  # see above

Outputs = Sequence[torch.Tensor]


def sensitivity(run: Callable[[], Outputs], leaves: Sequence[torch.Tensor], draws: int = DRAWS,
                seed: int = 0) -> list[torch.Tensor]:
    """max|δy| per output of ``run()`` (float64): every tensor in ``leaves`` (inputs and
    parameters, changed in place and restored) scaled by 1 + eps32·s, s = ±1 at random."""
    base = [y.detach().clone() for y in run()]
    assert all(y.dtype == torch.float64 for y in base), "the sensitivity is measured in float64"
    saved = [t.detach().clone() for t in leaves]
    gen = torch.Generator().manual_seed(seed)
    worst = [torch.zeros((), dtype=torch.float64) for _ in base]
    try:
        for _ in range(draws):
            with torch.no_grad():
                for t, x in zip(leaves, saved):
                    sign = torch.randint(0, 2, x.shape, generator=gen).to(x.dtype) * 2 - 1
                    t.copy_(x * (1 + EPS32 * sign))
            for i, (y, y0) in enumerate(zip(run(), base)):
                worst[i] = torch.maximum(worst[i], (y.detach() - y0).abs().max())
    finally:
        with torch.no_grad():
            for t, x in zip(leaves, saved):
                t.copy_(x)
    return [w.item() for w in worst]


def ratios(got: Outputs, ref: Outputs, sens: Sequence[float], C: float, eps: float = EPS32) -> list[float]:
    """max|got − ref| / (C · max|δy| · eps / eps32) per output: ≤ 1 passes.

    ``eps`` = EPS64 bounds a float64 run the same way (δy is linear in the perturbation)."""
    assert len(got) == len(ref) == len(sens)
    out = []
    for a, b, s in zip(got, ref, sens):
        assert a.shape == b.shape, (a.shape, b.shape)
        err = (a.detach().double() - b.detach().double()).abs().max().item()
        bound = C * s * eps / EPS32
        out.append(err / bound if bound > 0 else (0.0 if err == 0 else float("inf")))
    return out


def assert_within(got: Outputs, ref: Outputs, sens: Sequence[float], C: float, names: Sequence[str] | None = None,
                  eps: float = EPS32) -> list[float]:
    """Every output of ``got`` within C·eps·cond of the float64 ``ref``; returns the ratios."""
    r = ratios(got, ref, sens, C, eps)
    names = list(names) if names is not None else [str(i) for i in range(len(r))]
    worst = max(range(len(r)), key=r.__getitem__)
    assert r[worst] <= 1, f"{names[worst]}: error/bound {r[worst]:.3g} (all: " \
        + ", ".join(f"{n} {x:.2g}" for n, x in zip(names, r)) + ")"
    return r


@contextmanager
def float64_casts(*modules):
    """Inside: ``Tensor.float()`` returns float64, and ``torch.float32`` means float64 in each of
    ``modules`` (through its module-level ``torch``), so that a reference which casts its inputs
    to float32 runs in float64 on them; everything is restored on exit."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.Tensor, "float", torch.Tensor.double)
        for module in modules:
            mp.setattr(module, "torch", types.SimpleNamespace(**{**vars(torch), "float32": torch.float64}))
        yield
