"""fla's norms on CPU (adapters/cpu/fla_modules.py) against fla's own references in
fla.modules.layernorm: GroupNorm (layer and RMS kinds, with and without a residual),
outputs and the gradients of the input and the affine parameters, in float32 against the
reference run in float64, within the norm's own conditioning (tests/float_bounds.py)."""
from __future__ import annotations

import types

import pytest
import torch
from float_bounds import C, assert_within, sensitivity

pytest.importorskip("fla")

from recallbench.adapters.cpu import fla_modules as M  # noqa: E402

pytestmark = pytest.mark.parity


def _grads(fn, leaves, up):
    leaves = [t.clone().requires_grad_(True) for t in leaves]
    out = fn(*leaves)
    out = out[0] if isinstance(out, tuple) else out
    (out * up).sum().backward()
    return [out.detach()] + [t.grad for t in leaves]


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("groups", [1, 4])
def test_group_norm_matches_fla_reference(rms, residual, groups, monkeypatch):
    from fla.modules.layernorm import GroupNorm, group_norm_ref

    norm = GroupNorm(groups, 32, elementwise_affine=True, bias=True, is_rms_norm=rms, eps=1e-5)
    g = torch.Generator().manual_seed(groups + 2 * rms + 4 * residual)
    x, r, up = (torch.randn(2, 7, 32, generator=g) * 3 + 1 for _ in range(3))
    w, b = torch.randn(32, generator=g), torch.randn(32, generator=g)
    leaves = [x, w, b] + ([r] if residual else [])

    def ours(x, w, b, r=None):  # the module's settings, with these tensors as its affine
        view = types.SimpleNamespace(num_groups=norm.num_groups, is_rms_norm=norm.is_rms_norm,
                                     eps=norm.eps, weight=w, bias=b)
        return M.group_norm_forward(view, x, residual=r)

    def theirs(x, w, b, r=None):
        return group_norm_ref(x, w, b, groups, residual=r, eps=1e-5, is_rms_norm=rms)

    a = _grads(ours, leaves, up)
    monkeypatch.setattr(torch.Tensor, "float", torch.Tensor.double)  # the reference in float64
    leaves64, up64 = [t.double() for t in leaves], up.double()
    ref = _grads(theirs, leaves64, up64)
    assert len(a) == len(ref) == len(leaves) + 1
    assert a[0].dtype == torch.float32 and ref[0].dtype == torch.float64
    sens = sensitivity(lambda: _grads(theirs, leaves64, up64), leaves64 + [up64])
    assert_within(a, ref, sens, C, ["out", "dx", "dw", "db", "dr"][:len(a)])
