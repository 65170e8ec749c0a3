"""The fused CPU selective scan (adapters/cpu/selective_scan_fused.py) against independent code.

References: mamba-ssm's own ``selective_scan_ref``, a float64 token-by-token loop written
here, mamba-ssm's ``Mamba`` run on the reference, transformers' pure-torch ``MambaMixer`` /
``Mamba2Mixer`` and ``F.conv1d``.  Every float32 result is bounded against its reference run in
float64 on the same (float32-representable) inputs and weights, by the operation's own
conditioning measured there (tests/float_bounds.py); references that cast to float32 are made
to run in float64 for it (``float64_casts``).  float64 results against float64 references use
a relative error: max|ours − ref| / max|ref|.
"""
from __future__ import annotations

import copy

import pytest
import torch
from float_bounds import C as BOUND_C
from float_bounds import EPS64, assert_within, float64_casts, sensitivity
from hf_kernels import hf_uses_torch

try:  # before mamba_ssm: transformers binds its kernels at import (see test_adapters_mamba)
    import transformers.models.mamba.modeling_mamba as hf_mamba
    import transformers.models.mamba2.modeling_mamba2 as hf_mamba2
    from transformers import Mamba2Config, MambaConfig
except Exception:  # pragma: no cover - transformers missing or broken
    hf_mamba = hf_mamba2 = None

from recallbench.adapters.cpu.mamba_ssm_import import availability, import_mamba_ssm
from recallbench.adapters.cpu.mamba_ssm_swaps import SWAPS
from recallbench.adapters.cpu import selective_scan_compiled
from recallbench.adapters.cpu.selective_scan_fused import selective_scan_cpu
from recallbench.api.config import ModelConfig
from recallbench.api.registry import ADAPTERS
from recallbench.harness.model import RecallModel

AVAILABLE, REASON = availability()
pytestmark = [pytest.mark.parity,
              pytest.mark.skipif(not AVAILABLE, reason=REASON or "mamba-ssm unavailable")]

NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def rel(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return ((ours.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


def scan_inputs(bc: str, seed: int, L: int = 37, dtype=torch.float32) -> list[torch.Tensor]:
    """u, delta, A, B, C, D, z, delta_bias; strong decays: Δ·|A| up to ~60 in some channels."""
    g = torch.Generator().manual_seed(seed)
    b, d, n = 2, 6, 4
    bc_shape = {"fixed": (d, n), "shared": (b, n, L), "grouped": (b, 2, n, L)}[bc]
    delta_bias = torch.linspace(-4.0, 2.0, d)  # softplus(…) from ~0.02 to ~2
    A = -torch.rand(d, n, generator=g) * 30  # A ∈ [−30, 0]
    ts = [torch.randn(b, d, L, generator=g), torch.randn(b, d, L, generator=g), A,
          torch.randn(*bc_shape, generator=g), torch.randn(*bc_shape, generator=g),
          torch.randn(d, generator=g), torch.randn(b, d, L, generator=g), delta_bias]
    return [t.to(dtype).requires_grad_() for t in ts]


def float64_loop(u, delta, A, B, C, D, z, delta_bias):
    """The selective scan token by token in float64 (delta_softplus=True), with its last state."""
    delta = torch.nn.functional.softplus(delta + delta_bias[:, None])
    b, d, L = u.shape
    per_channel = {2: lambda M, t: M, 3: lambda M, t: M[:, None, :, t],
                   4: lambda M, t: M.repeat_interleave(d // M.shape[1], 1)[..., t]}
    Bt, Ct = per_channel[B.dim()], per_channel[C.dim()]
    x = u.new_zeros(b, d, A.shape[1])
    ys = []
    for t in range(L):
        x = torch.exp(delta[..., t, None] * A) * x + (delta[..., t] * u[..., t])[..., None] * Bt(B, t)
        ys.append((x * Ct(C, t)).sum(-1))
    y = torch.stack(ys, -1) + u * D[:, None]
    return y * torch.nn.functional.silu(z), x


def outputs_and_grads(fn, ts):
    y, last = fn(ts)
    weights = torch.linspace(-1, 1, y.shape[-1]).to(y.dtype)  # the same values in either dtype
    loss = (y * weights).square().sum() + last.sum()
    return [y, last, *torch.autograd.grad(loss, ts)]


def ours(ts):
    return selective_scan_cpu(*ts[:5], D=ts[5], z=ts[6], delta_bias=ts[7], delta_softplus=True,
                              return_last_state=True)


@pytest.mark.parametrize("bc, path", [("shared", "compiled"), ("shared", "torch"),
                                      ("grouped", "torch"), ("fixed", "torch")])
def test_fused_scan_equals_selective_scan_ref_and_a_float64_loop(bc, path, monkeypatch):
    """Shared B and C take the compiled loop where it builds, and the torch scan without it.
    Ours in float32 within C·eps32·cond of the float64 loop and of ``selective_scan_ref`` run in
    float64 (which itself meets the loop at float64's bound); ours in float64 equals the loop."""
    import_mamba_ssm()
    if path == "compiled" and selective_scan_compiled.library() is None:
        pytest.skip("the compiled scan does not build here")
    if path == "torch":
        monkeypatch.setattr(selective_scan_compiled, "library", lambda: None)
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref

    ts = scan_inputs(bc, seed=len(bc))
    got = outputs_and_grads(ours, ts)
    ts64 = [t.detach().double().requires_grad_() for t in ts]

    def loop64():
        return outputs_and_grads(lambda t: float64_loop(*t), ts64)

    exact = loop64()
    with float64_casts():
        ref64 = outputs_and_grads(lambda t: selective_scan_ref(
            *t[:5], D=t[5], z=t[6], delta_bias=t[7], delta_softplus=True, return_last_state=True), ts64)
    ours64 = outputs_and_grads(ours, ts64)
    names = ("out", "last_state", *NAMES)
    assert all(a.dtype == torch.float32 for a in got)
    assert all(t.dtype == torch.float64 for t in (*exact, *ref64, *ours64))
    sens = sensitivity(loop64, ts64)
    assert_within(got, exact, sens, BOUND_C, names)
    assert_within(got, ref64, sens, BOUND_C, names)
    assert_within(ref64, exact, sens, BOUND_C, names, eps=EPS64)
    for name, a64, e in zip(names, ours64, exact):
        assert rel(a64, e) <= 1e-12, (name, rel(a64, e))
    assert rel(got[0], exact[0]) > 0  # float32 really ran in float32


def test_fused_scan_without_optional_inputs_and_complex_A():
    import_mamba_ssm()
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref

    u, delta, A, B, C = (t.detach() for t in scan_inputs("shared", seed=9, L=5)[:5])
    delta = delta.abs()
    got = selective_scan_cpu(u, delta, A, B, C)
    args64 = [t.double() for t in (u, delta, A, B, C)]

    def ref64():
        with float64_casts():
            return [selective_scan_ref(*args64)]

    assert got.dtype == torch.float32 and ref64()[0].dtype == torch.float64
    assert_within([got], ref64(), sensitivity(ref64, args64), BOUND_C, ["out"])
    Ac = torch.complex(A, torch.ones_like(A))
    Bc, Cc = torch.cat([B, B], -1), torch.cat([C, -C], -1)  # complex B, C: (b, n, 2L)
    torch.testing.assert_close(selective_scan_cpu(u, delta, Ac, Bc, Cc),
                               selective_scan_ref(u, delta, Ac, Bc, Cc), rtol=0, atol=0)


def _run_model(model, x, y):
    model.zero_grad(set_to_none=True)
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)
    loss.backward()
    return logits.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


def _reference_model_run(model, x, y):
    """``_run_model`` on mamba-ssm's unfused branch with ``selective_scan_ref`` as the scan."""
    from mamba_ssm.modules import mamba_simple
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref

    with SWAPS.applied():  # the blocks' own (nested) install keeps these bindings
        # no conv kernel: Mamba.forward takes its own unfused branch (nn.Conv1d, its
        # projections and layout changes), which calls selective_scan_fn: the reference
        conv, mamba_simple.causal_conv1d_fn = mamba_simple.causal_conv1d_fn, None
        mamba_simple.selective_scan_fn = selective_scan_ref
        try:
            return _run_model(model, x, y)
        finally:
            mamba_simple.selective_scan_fn = selective_scan_cpu
            mamba_simple.causal_conv1d_fn = conv


def test_mamba_adapter_logits_and_grads_equal_with_the_reference_scan():
    """The mamba adapter (fused branch: mamba_inner_cpu, causal_conv1d_cpu, the compiled scan)
    in float32 vs mamba-ssm's unfused branch on selective_scan_ref, the same weights run in
    float64: logits and every gradient within C·eps32·cond."""
    import_mamba_ssm()

    cfg = ModelConfig(adapter="mamba", d_model=16, d_state=8, n_layers=2)
    torch.manual_seed(0)
    model = RecallModel(ADAPTERS.get("mamba")(cfg), 32)
    x = torch.randint(0, 32, (3, 29), generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 32, (3, 29), generator=torch.Generator().manual_seed(2))
    logits, grads = _run_model(model, x, y)
    model64 = copy.deepcopy(model).double()  # the same (float32-representable) weights

    def reference():
        with float64_casts():
            ref_logits, ref_grads = _reference_model_run(model64, x, y)
        return [ref_logits, *(ref_grads[k] for k in sorted(ref_grads))]

    ref = reference()
    assert sorted(grads) == [k for k, _ in sorted(model64.named_parameters())] and len(grads) > 10
    assert logits.dtype == torch.float32 and all(t.dtype == torch.float64 for t in ref)
    sens = sensitivity(reference, list(model64.parameters()))
    assert_within([logits, *(grads[k] for k in sorted(grads))], ref, sens, BOUND_C,
                  ["logits", *sorted(grads)])


def _mixer_run(module, x, swapped):
    """Output, input gradient and every parameter's gradient (by sorted name) of
    ``module(x).square().sum()``."""
    params = dict(sorted(module.named_parameters()))
    xi = x.clone().requires_grad_()
    with SWAPS.applied() if swapped else torch.enable_grad():
        out = module(xi)
    grads = torch.autograd.grad(out.square().sum(), [xi, *params.values()])
    return [out.detach(), *grads], ["out", "dx", *params]


def _compare_mixers(ours, theirs, x, hf_module):
    """Same weights (copied by name): ours (mamba-ssm on SWAPS) in float32 vs transformers'
    torch path run in float64 (its float32 casts pointed at float64): output, input gradient and
    every parameter gradient within C·eps32·cond; and ours run in float64 the same way within
    C·eps64·cond (the two are the same maths, and the reference really ran in float64)."""
    mine, ref = dict(ours.named_parameters()), dict(theirs.named_parameters())
    assert sorted(mine) == sorted(ref)
    with torch.no_grad():
        for name, p in ref.items():
            p.copy_(mine[name])
    got, names = _mixer_run(ours, x, True)
    theirs64, ours64, x64 = theirs.double(), copy.deepcopy(ours).double(), x.double()

    def reference():
        with float64_casts(hf_module):
            return _mixer_run(theirs64, x64, False)[0]

    want = reference()
    assert _mixer_run(theirs64, x64, False)[1] == names and len(names) > 8
    assert got[0].dtype == torch.float32 and all(t.dtype == torch.float64 for t in want)
    sens = sensitivity(reference, [x64, *theirs64.parameters()])
    assert_within(got, want, sens, BOUND_C, names)
    with float64_casts():  # mamba-ssm casts A_log, D and dt's bias to float32 too
        ours64_run = _mixer_run(ours64, x64, True)[0]
    assert_within(ours64_run, want, sens, BOUND_C, names, eps=EPS64)  # the same maths


@pytest.mark.skipif(hf_mamba is None, reason="transformers' Mamba is not importable")
def test_mamba_mixer_gradients_equal_transformers_mamba_mixer():
    if not hf_uses_torch(hf_mamba.mamba_selective_scan):
        pytest.skip("transformers bound its Mamba scan to mamba-ssm (imported before transformers)")
    ms = import_mamba_ssm()
    torch.manual_seed(0)
    ours = ms.Mamba(16, d_state=8, d_conv=3, expand=2)
    with torch.no_grad():  # off the initial values, so the copy is really tested
        for p in ours.parameters():
            p.add_(0.1 * torch.randn_like(p))
    cfg = MambaConfig(hidden_size=16, state_size=8, conv_kernel=3, expand=2,
                      time_step_rank=ours.dt_rank, use_conv_bias=True, use_bias=False,
                      num_hidden_layers=1)
    _compare_mixers(ours, hf_mamba.MambaMixer(cfg, layer_idx=0),
                    torch.randn(2, 23, 16, generator=torch.Generator().manual_seed(3)), hf_mamba)


@pytest.mark.skipif(hf_mamba2 is None, reason="transformers' Mamba2 is not importable")
def test_mamba2_mixer_gradients_equal_transformers_mamba2_mixer():
    if not hf_uses_torch(hf_mamba2.mamba2_chunk_scan):
        pytest.skip("transformers bound its Mamba-2 scan to mamba-ssm (imported before transformers)")
    ms = import_mamba_ssm()
    torch.manual_seed(0)
    ours = ms.Mamba2(16, d_state=8, d_conv=3, expand=2, headdim=8, ngroups=2, chunk_size=8)
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.1 * torch.randn_like(p))
    cfg = Mamba2Config(hidden_size=16, state_size=8, conv_kernel=3, expand=2, num_heads=4,
                       head_dim=8, n_groups=2, chunk_size=8, use_conv_bias=True, use_bias=False,
                       layer_norm_epsilon=ours.norm.eps, num_hidden_layers=1,
                       time_step_limit=(0.0, float("inf")))
    _compare_mixers(ours, hf_mamba2.Mamba2Mixer(cfg, layer_idx=0),
                    torch.randn(2, 21, 16, generator=torch.Generator().manual_seed(4)), hf_mamba2)


@pytest.mark.parametrize("chunks, initial", [(1, False), (3, True)])
def test_ssd_batched_equals_ssd_minimal_discrete(chunks, initial):
    """The batched-matmul SSD against mamba-ssm's own Listing 1: output, final state and the
    gradient of every input, in float64 (both are exact algebra; only summation order differs)."""
    from mamba_ssm.modules.ssd_minimal import ssd_minimal_discrete

    from recallbench.adapters.cpu.mamba_ssm_kernels import ssd_batched

    g = torch.Generator().manual_seed(3)
    b, block, h, p, n = 2, 8, 3, 4, 5
    length = chunks * block

    def inputs():
        torch.manual_seed(0)
        return [(torch.randn(*shape, generator=g, dtype=torch.float64) * scale).requires_grad_()
                for shape, scale in (((b, length, h, p), 1), ((b, length, h, n), 1),
                                     ((b, length, h, n), 1), ((b, 1, h, p, n), 1))]

    X, B, C, init = inputs()
    A = (-torch.rand(b, length, h, generator=g, dtype=torch.float64) * 3).requires_grad_()
    results = []
    for fn in (ssd_batched, ssd_minimal_discrete):
        y, final = fn(X, A, B, C, block, init if initial else None)
        w1 = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        w2 = torch.randn(final.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        grads = torch.autograd.grad((y * w1).sum() + (final * w2).sum(),
                                    [X, A, B, C] + ([init] if initial else []))
        results.append([y, final, *grads])
    for ours, ref in zip(*results):
        assert torch.allclose(ours, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seqlen, width, bias", [(37, 4, True), (37, 4, False), (2, 4, True), (9, 1, True)])
def test_causal_conv_matches_torch_conv1d(dtype, seqlen, width, bias):
    """The (batch, L, d) causal depthwise conv with its own backward against F.conv1d (groups
    = d, padding W − 1, cut to L): output and the gradients of x, weight and bias, including
    a kernel wider than the sequence.  Float32 within C·eps32·cond of F.conv1d in float64;
    float64 against F.conv1d in float64."""
    import torch.nn.functional as F

    from recallbench.adapters.cpu.mamba_ssm_kernels import causal_conv_blc

    g = torch.Generator().manual_seed(seqlen + width)
    x, w = torch.randn(3, seqlen, 6, generator=g, dtype=dtype), torch.randn(6, width, generator=g, dtype=dtype)
    b = torch.randn(6, generator=g, dtype=dtype) if bias else None
    up = torch.randn(3, seqlen, 6, generator=g, dtype=dtype)

    def run(fn, x, w, b, up):
        leaves = [t.clone().requires_grad_(True) for t in (x, w) + ((b,) if bias else ())]
        out = fn(*leaves, *(() if bias else (None,)))
        (out * up).sum().backward()
        return [out.detach()] + [t.grad for t in leaves]

    def reference(x, w, b):
        y = F.conv1d(x.transpose(1, 2), w.unsqueeze(1), b, padding=w.shape[1] - 1, groups=w.shape[0])
        return y[..., :x.shape[1]].transpose(1, 2)

    ours = run(causal_conv_blc, x, w, b, up)
    names = ["out", "dx", "dweight", "dbias"][:3 + bias]
    if dtype == torch.float32:
        leaves64 = [t.double() for t in (x, w, b, up) if t is not None]
        args64 = leaves64 if bias else leaves64[:2] + [None, leaves64[2]]
        ref = run(reference, *args64)
        assert len(ours) == len(ref) == 3 + bias and ref[0].dtype == torch.float64
        assert_within(ours, ref, sensitivity(lambda: run(reference, *args64), leaves64), BOUND_C, names)
        return
    ref = run(reference, x, w, b, up)
    assert len(ours) == len(ref) == 3 + bias
    for i, (a, r) in enumerate(zip(ours, ref)):
        assert a.shape == r.shape and rel(a, r) <= 1e-12, (i, rel(a, r))
