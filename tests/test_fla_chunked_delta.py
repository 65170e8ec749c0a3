"""The chunked delta-rule kernels (adapters/cpu/fla_chunked_delta.py) against fla's recurrent
references run in float64: forward outputs, final states and the gradients of every input, the
chunked form run in float32 and in float64; and the deltanet / gated-deltanet adapters'
gradients with the chunked kernels against the same models on the recurrent references in
float64.  Each bound is the operation's own conditioning (tests/float_bounds.py)."""
from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from float_bounds import EPS32, EPS64, C, assert_within, sensitivity

fla = pytest.importorskip("fla", reason="flash-linear-attention is not installed")

from fla.ops.delta_rule.naive import delta_rule_recurrence  # noqa: E402
from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule  # noqa: E402

pytestmark = pytest.mark.parity

from recallbench.adapters.cpu import fla_chunked_delta as D  # noqa: E402
from recallbench.adapters.cpu import fla_kernels as K  # noqa: E402
from recallbench.adapters.cpu.fla_swaps import SWAPS  # noqa: E402
from recallbench.adapters.kernel_swap import Swap, SwapSet  # noqa: E402
from recallbench.api.config import ModelConfig  # noqa: E402
from recallbench.api.registry import ADAPTERS  # noqa: E402
from recallbench.harness.model import RecallModel  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NAMES = ["o", "final state"]


@pytest.fixture
def float64_references(monkeypatch):
    """fla's recurrent references, and fla_kernels around them, evaluated in float64: they cast
    with ``.float()`` or ``.to(torch.float32)``, so both are pointed at float64 here."""
    import fla.ops.gated_delta_rule.naive as gated

    monkeypatch.setattr(torch.Tensor, "float", torch.Tensor.double)
    wide = types.SimpleNamespace(**{**vars(torch), "float32": torch.float64})
    monkeypatch.setattr(gated, "torch", wide)
    monkeypatch.setattr(K, "torch", wide)


def make_inputs(B, T, H, Kd, V, HV=None, seed=0):
    """q, k (l2-normalised), v, beta ∈ (0, 1), g = log α < 0, h0: float32 leaves."""
    HV = HV or H
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    return {"q": randn(B, T, H, Kd), "k": F.normalize(randn(B, T, H, Kd), dim=-1),
            "v": randn(B, T, HV, V), "beta": randn(B, T, HV).sigmoid(),
            "g": F.logsigmoid(randn(B, T, HV) + 2), "h0": randn(B, HV, Kd, V)}


def outputs_and_grads(run, inputs, dtype=torch.float32, seed=1):
    """run(**leaves) -> (o, ht); returns o, ht and the gradients of a random projection of both."""
    leaves = {n: x.detach().to(dtype, copy=True).requires_grad_() for n, x in inputs.items()}
    o, ht = run(**leaves)
    gen = torch.Generator().manual_seed(seed)
    wo, wh = torch.randn(o.shape, generator=gen), torch.randn(ht.shape, generator=gen)
    ((o * wo.to(o.dtype)).sum() + (ht * wh.to(ht.dtype)).sum()).backward()
    return o, ht, {n: x.grad for n, x in leaves.items()}


def _flat(result):
    o, ht, grads = result
    return [o, ht, *grads.values()], NAMES + [f"d{n}" for n in grads]


def assert_matches_reference(ours, reference, inputs, request, eps64=EPS64):
    """The chunked kernel in float32 within C·eps32·cond of the reference run in float64, and
    the chunked algebra run in float64 within C·eps64·cond of it (cond measured on the
    reference in float64: every input perturbed by one float32 ulp).  ``eps64`` = EPS32 where
    the float64 run goes through a float32 step on purpose."""
    got32 = outputs_and_grads(ours, inputs)
    got64 = outputs_and_grads(ours, inputs, torch.float64)
    assert got32[0].dtype == torch.float32 and got64[0].dtype == torch.float64
    request.getfixturevalue("float64_references")
    inputs64 = {n: x.double() for n, x in inputs.items()}
    want, names = _flat(outputs_and_grads(reference, inputs64, torch.float64))
    assert want[0].dtype == torch.float64 and len(want) == len(inputs) + 2
    sens = sensitivity(lambda: _flat(outputs_and_grads(reference, inputs64, torch.float64))[0],
                       list(inputs64.values()))
    assert_within(_flat(got32)[0], want, sens, C, names)
    assert_within(_flat(got64)[0], want, sens, C, names, eps=eps64)


# ---------------------------------------------------------------------------
# the kernels against fla's recurrent references
# ---------------------------------------------------------------------------
# (T, chunk, initial state): T a multiple of the chunk or not, a chunk longer than T (one
# chunk: with no initial state the kernel takes its stateless shortcut), a chunk of 5
CASES = [(37, 16, True), (64, 64, True), (50, 64, True), (50, 64, False), (24, 5, True), (24, 5, False)]


@pytest.mark.parametrize("T, chunk, h0", CASES)
def test_delta_rule_matches_fla_delta_rule_recurrence(T, chunk, h0, request):
    x = make_inputs(2, T, 3, 8, 6)  # H > 1
    del x["g"]
    if not h0:
        del x["h0"]

    def reference(q, k, v, beta, h0=None):
        o, ht = delta_rule_recurrence(*(t.transpose(1, 2) for t in (q, k, v, beta)), h0, True)
        return o.transpose(1, 2), ht

    def ours(q, k, v, beta, h0=None):
        return D.delta_rule(q, k, v, beta, initial_state=h0, output_final_state=True, chunk=chunk)

    assert_matches_reference(ours, reference, x, request)


@pytest.mark.parametrize("T, chunk, h0", CASES)
def test_gated_delta_rule_matches_fla_naive_recurrent_gated_delta_rule(T, chunk, h0, request):
    x = make_inputs(2, T, 3, 8, 6)
    if not h0:
        del x["h0"]

    def reference(q, k, v, beta, g, h0=None):
        return naive_recurrent_gated_delta_rule(q, k, v, beta, g, 0.3, h0, True)

    def ours(q, k, v, beta, g, h0=None):
        return D.gated_delta_rule(q, k, v, g, beta, scale=0.3, initial_state=h0,
                                  output_final_state=True, chunk=chunk)

    assert_matches_reference(ours, reference, x, request)


def test_gated_delta_rule_kernel_flags_match_the_recurrent_wrapper(request):
    """The flags the layers pass (l2norm, beta sigmoid with negative eigenvalues, the gate with
    A_log and dt_bias, state_v_first) and grouped value heads (HV = 2H), against
    fla_kernels.gated_delta_rule (the same flags around fla's recurrent reference)."""
    x = make_inputs(2, 21, 2, 8, 6, HV=4)
    x["q"], x["k"] = x["q"] * 3, x["k"] * 2  # l2-normalised in the kernel
    x["beta"], x["g"] = torch.randn(2, 21, 4), torch.randn(2, 21, 4)  # raw: sigmoid, gate in kernel
    x["h0"] = x["h0"].transpose(-1, -2)  # (B, HV, V, K)
    x["A_log"], x["dt_bias"] = torch.randn(4) * 0.5, torch.randn(4)

    def run(fn, **kw):
        def call(q, k, v, beta, g, h0, A_log, dt_bias):
            return fn(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                      use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                      use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias, state_v_first=True, **kw)
        return call

    # the in-kernel l2norm, beta sigmoid and gate are fla's maths in float32 (fla_kernels), so
    # the chunked form run in float64 is float32-accurate here, and bounded as such
    assert_matches_reference(run(D.gated_delta_rule, chunk=8), run(K.gated_delta_rule), x, request,
                             eps64=EPS32)


def test_delta_rule_flags_and_per_channel_beta(request):
    """l2norm in the kernel, a scale, beta=None (β = 1), no state; a (B, T, H, V) beta runs
    through the recurrent reference (in float64)."""
    x = make_inputs(1, 19, 2, 4, 5)
    q, k, v = x["q"] * 2, x["k"] * 3, x["v"]
    kw = dict(scale=0.7, use_qk_l2norm_in_kernel=True, output_final_state=True)
    betas = (None, torch.rand(1, 19, 2, 5))
    got = [D.delta_rule(q, k, v, beta, chunk=8, **kw) for beta in betas]
    request.getfixturevalue("float64_references")
    for beta, (o, ht) in zip(betas, got):
        leaves = [t.double() for t in (q, k, v) + (() if beta is None else (beta,))]

        def reference():
            return K.delta_rule(*leaves[:3], leaves[3] if beta is not None else None, **kw)

        assert o.dtype == torch.float32 and reference()[0].dtype == torch.float64
        assert_within([o, ht], reference(), sensitivity(reference, leaves), C, NAMES)


def test_no_final_state_unless_asked_and_packed_sequences_refused():
    x = make_inputs(1, 10, 1, 4, 4)
    o, ht = D.gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"])
    assert ht is None and o.shape == x["v"].shape
    with pytest.raises(NotImplementedError, match="cu_seqlens"):
        D.delta_rule(x["q"], x["k"], x["v"], x["beta"], cu_seqlens=torch.tensor([0, 5, 10]))


# ---------------------------------------------------------------------------
# the adapters: chunked kernels (the swap table) vs the recurrent references
# ---------------------------------------------------------------------------
def _recurrent_swaps() -> SwapSet:
    """The swap table's delta-rule rows, pointed back at the recurrent references."""
    rows = [Swap(s.target, K.gated_delta_rule if s.target.endswith("gated_delta_rule") else K.delta_rule,
                 s.reference) for s in SWAPS if s.target.endswith("delta_rule")]
    assert len(rows) == 4
    return SwapSet("recurrent delta rules", tuple(rows), dispatch=False)


def _model(name: str) -> RecallModel:
    torch.manual_seed(0)
    cfg = ModelConfig(adapter=name, d_model=32, d_state=8, n_layers=1, d_conv=2, n_heads=2, expand=2)
    return RecallModel(ADAPTERS.get(name)(cfg), 16)


def _model_grads(model: RecallModel, x: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model(x).square().mean().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("name", ["deltanet", "gated-deltanet"])
def test_adapter_gradients_equal_with_chunked_and_recurrent_kernels(name, request):
    """L = 80: two chunks of 64, the second padded.  Every parameter's gradient of the float32
    model on the chunked kernels within C·eps32·cond of the same model (same weights) on the
    recurrent references in float64."""
    ok, why = ADAPTERS.get(name).availability()
    if not ok:
        pytest.skip(why)
    x = torch.randint(0, 16, (2, 80), generator=torch.Generator().manual_seed(0))
    model = _model(name)
    names = [n for n, _ in model.named_parameters()]
    chunked = _model_grads(model, x)
    for s in SWAPS:
        if s.target.endswith("delta_rule"):
            assert s.replacement.startswith("recallbench.adapters.cpu.fla_chunked_delta:")
    request.getfixturevalue("float64_references")
    model64 = model.double()  # in place: chunked holds the float32 gradients already
    with _recurrent_swaps().applied():
        recurrent = _model_grads(model64, x)
        sens = sensitivity(lambda: _model_grads(model64, x), list(model64.parameters()))
    assert len(chunked) == len(recurrent) > 5 and recurrent[0].dtype == torch.float64
    assert all(g.dtype == torch.float32 for g in chunked)
    assert sum(g.abs().max() > 0 for g in recurrent) > 5
    assert_within(chunked, recurrent, sens, C, names)


def _bench(*args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_fla_chunked_delta.py"), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.slow
def test_benchmark_prints_a_ratio_per_chunk_size():
    proc = _bench("--batch", "2", "--length", "20", "--chunks", "4", "16", "--calls", "1", "--rounds", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for kernel in ("delta_rule", "gated_delta_rule"):
        ratios = [ln for ln in proc.stdout.splitlines() if ln.startswith(kernel) and "x faster" in ln]
        assert len(ratios) == 2
        assert all(float(re.search(r"([\d.]+)x faster", ln).group(1)) > 0 for ln in ratios)
        assert re.search(rf"{kernel} +fastest chunk (4|16) \([\d.]+x the reference\)", proc.stdout)
    bad = _bench("--rounds", "0")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].endswith("--rounds must be >= 1")
