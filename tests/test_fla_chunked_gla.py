"""The chunked gated-linear-attention kernels (adapters/cpu/fla_chunked_gla.py) against fla's own
naive recurrent references (fla/ops/<op>/naive.py, through adapters/cpu/fla_kernels.py), run in
float32 and again in float64: outputs, final states and the gradients of every input, for weak
decays (the factored form) and strong ones (segment sums), T not a multiple of the chunk, with an
initial state.  Then whole models: each affected adapter gives the same logits and parameter
gradients with the chunked swap table as with the naive one.  Every float32 result is bounded
against the float64 run by the operation's own conditioning (tests/float_bounds.py).  Last,
bench_adapters' ratio check."""
from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from float_bounds import C, assert_within, sensitivity

pytest.importorskip("fla")

pytestmark = pytest.mark.parity

from recallbench.adapters.cpu import fla_chunked_gla as G  # noqa: E402
from recallbench.adapters.cpu import fla_kernels as K  # noqa: E402
from recallbench.adapters.cpu.fla_swaps import SWAPS  # noqa: E402
from recallbench.adapters.kernel_swap import Swap, SwapSet  # noqa: E402
from recallbench.api.config import ModelConfig  # noqa: E402
from recallbench.api.registry import ADAPTERS, TASKS  # noqa: E402
from recallbench.harness.model import RecallModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
B, T, H, DK, DV, M = 2, 37, 2, 8, 5, 6  # T = 37: not a multiple of any chunk length
STRENGTH = {"weak": 0.05, "strong": 8.0}  # × logsigmoid: Σ|g| per chunk far below / above LIMIT


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def _inputs(op: str, strength: float, seed: int = 0, T: int = T) -> tuple[list, dict]:
    """Positional tensors (all differentiated, initial states included) and keyword flags of ``op``."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    q, k, v = r(B, T, H, DK), r(B, T, H, DK), r(B, T, H, DV)
    gk = F.logsigmoid(r(B, T, H, DK)) * strength
    h0 = r(B, H, DK, DV)
    if op == "gla":
        return [q, k, v, gk], {"initial_state": h0.transpose(-1, -2).contiguous(), "state_v_first": True,
                               "scale": 0.4}
    if op == "simple_gla":
        return [q, k, v, gk[..., 0]], {"initial_state": h0, "scale": 0.7}
    if op == "rwkv6":
        return [q, k, v, gk, r(H, DK)], {"initial_state": h0, "scale": 1.0}
    if op == "gsa":
        s, gs = r(B, T, H, M), F.logsigmoid(r(B, T, H, M)) * strength
        return [q, k, v, s, gs], {"initial_state": (r(B, H, DK, M), r(B, H, M, DV)), "scale": 1.0}
    if op == "linear_attn":
        return [q, k, v], {"initial_state": h0}
    if op == "linear_attn_normalized":  # positive features, as the layers' feature maps give
        return [q.sigmoid(), k.sigmoid(), v], {"initial_state": (h0, k[:, :1].sigmoid()), "normalize": True}
    assert op == "retention"
    return [q, k, v], {"initial_state": h0}


def _tensors(args, kw) -> list[torch.Tensor]:
    """Every tensor among the arguments (initial states in tuples included)."""
    flat = [*args, *kw.values()]
    return [t for x in flat for t in (x if isinstance(x, tuple) else (x,)) if isinstance(t, torch.Tensor)]


def _double(args, kw):
    """The arguments in float64 (the same values: they are float32)."""
    def d(x):
        return tuple(d(y) for y in x) if isinstance(x, tuple) else x.double() if isinstance(x, torch.Tensor) else x
    return [d(a) for a in args], {n: d(x) for n, x in kw.items()}


def _run(fn, args, kw, dtype):
    """fn's output and final state, and the gradients of a fixed random functional of both w.r.t.
    every tensor input (initial states included), all inputs cast to ``dtype``."""
    leaves = []

    def leaf(x):
        if isinstance(x, tuple):
            return tuple(leaf(y) for y in x)
        t = x.to(dtype).requires_grad_()
        leaves.append(t)
        return t

    args = [leaf(a) for a in args]
    kw = {n: leaf(x) if isinstance(x, (torch.Tensor, tuple)) else x for n, x in kw.items()}
    o, state = fn(*args, **kw, output_final_state=True)
    outs = [o, *(state if isinstance(state, tuple) else (state,))]
    g = torch.Generator().manual_seed(99)
    loss = sum((x * torch.randn(x.shape, generator=g, dtype=torch.float64).to(x.dtype)).sum() for x in outs)
    return outs + list(torch.autograd.grad(loss, leaves))


@pytest.fixture
def float64_references(monkeypatch):
    """fla's naive references evaluated in float64: they cast with ``.float()`` (and linear
    attention's with ``.to(torch.float32)``), so both casts are pointed at float64 here."""
    import fla.ops.linear_attn.naive as lin

    monkeypatch.setattr(torch.Tensor, "float", torch.Tensor.double)
    monkeypatch.setattr(lin, "torch", types.SimpleNamespace(**{**vars(torch), "float32": torch.float64}))


OPS = {"gla": (G.gla, K.gla), "simple_gla": (G.simple_gla, K.simple_gla), "rwkv6": (G.rwkv6, K.rwkv6),
       "gsa": (G.gsa, K.gsa), "linear_attn": (G.linear_attn, K.linear_attn),
       "linear_attn_normalized": (G.linear_attn, K.linear_attn), "retention": (G.retention, K.retention)}


@pytest.mark.parametrize("strength", STRENGTH)
@pytest.mark.parametrize("op", OPS)
def test_matches_the_naive_reference_in_float32_and_float64(op, strength, request):
    """The chunked kernel in float32 within C·eps32·cond of fla's naive recurrence run in
    float64: outputs, final states and every gradient."""
    chunked, naive = OPS[op]
    args, kw = _inputs(op, STRENGTH[strength])
    ours = _run(chunked, args, kw, torch.float32)
    request.getfixturevalue("float64_references")
    args64, kw64 = _double(args, kw)
    theirs64 = _run(naive, args64, kw64, torch.float64)
    assert len(ours) == len(theirs64) >= 5
    assert all(t.dtype == torch.float64 for t in theirs64)
    assert all(a.dtype == torch.float32 for a in ours)
    sens = sensitivity(lambda: _run(naive, args64, kw64, torch.float64), _tensors(args64, kw64))
    assert_within(ours, theirs64, sens, C)


@pytest.mark.parametrize("op", ["gla", "rwkv6", "gsa"])
def test_factored_chunks_split_at_their_middle(op, request):
    """Log-decays of 0.85-0.95 per step: a 64-step chunk decays by more than e^-LIMIT, each of its
    halves by less, so the factored form takes chunks of 64 (its factors counted from the middle
    step, none beyond e^±LIMIT), three over T = 150 with the state carried across; in float32
    within C·eps32·cond of the naive recurrence in float64, values, states and gradients."""
    chunked, naive = OPS[op]
    args, kw = _inputs(op, 1.0, T=150)
    i = 4 if op == "gsa" else 3  # the per-channel decays
    args[i] = -(0.85 + 0.1 * torch.rand(args[i].shape, generator=torch.Generator().manual_seed(2)))
    assert G.plan(args[i]) == (64, True)
    halves = args[i][:, :64].abs().unflatten(1, (2, 32)).sum(2)
    assert halves.amax() <= G.LIMIT < halves.sum(1).amin()
    ours = _run(chunked, args, kw, torch.float32)
    request.getfixturevalue("float64_references")
    args64, kw64 = _double(args, kw)
    theirs64 = _run(naive, args64, kw64, torch.float64)
    assert all(torch.isfinite(t).all() for t in ours)
    sens = sensitivity(lambda: _run(naive, args64, kw64, torch.float64), _tensors(args64, kw64))
    assert_within(ours, theirs64, sens, C)


def test_both_forms_are_exercised():
    """Weak decays take the factored form, strong ones the segment sums (so the tests above cover both)."""
    weak, strong = (F.logsigmoid(torch.randn(B, T, H, DK)) * STRENGTH[s] for s in ("weak", "strong"))
    assert G.plan(weak) == (min(T, G.FACTORED_CHUNKS[0]), True)
    assert G.plan(strong) == (G.KEY_CHUNK, False)


def test_extreme_decays_stay_finite():
    """Per-step log-decays down to -1e4 (a gate shut at once): no overflow, no NaN in values or grads,
    and the output is the current token's own k v product (nothing older survives)."""
    args, kw = _inputs("gla", 1.0)
    args[3] = torch.full_like(args[3], -1e4)
    q, k, v = (a.clone().requires_grad_() for a in args[:3])
    o, _ = G.gla(q, k, v, args[3], scale=1.0)
    o.sum().backward()
    q64, k64, v64 = (a.double() for a in args[:3])

    def own():  # in float64
        return [(q64 * k64).sum(-1, keepdim=True) * v64]

    assert_within([o], own(), sensitivity(own, [q64, k64, v64]), C, ["o"])
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_refuses_what_it_does_not_cover():
    q = torch.randn(1, 4, 1, 2)
    with pytest.raises(NotImplementedError, match="cu_seqlens"):
        G.gla(q, q, q, q, cu_seqlens=torch.tensor([0, 4]))
    with pytest.raises(NotImplementedError, match="gv"):
        G.gla(q, q, q, q, gv=q)


# ---------------------------------------------------------------------------
# whole models: the chunked table against the naive one
# ---------------------------------------------------------------------------
def _naive_table() -> SwapSet:
    """SWAPS with every chunked kernel of this module replaced by its fla_kernels counterpart."""
    rows = tuple(Swap(s.target, getattr(K, s.replacement.__name__), s.reference) for s in SWAPS
                 if getattr(s.replacement, "__module__", "") == G.__name__)
    return SwapSet("fla naive recurrences", rows, dispatch=True)


def _logits_and_grads(model, x):
    model.zero_grad()
    logits = model(x)
    (logits * torch.linspace(-1, 1, logits.shape[-1])).sum().backward()
    return [logits.detach()] + [p.grad.clone() for p in model.parameters() if p.grad is not None]


ADAPTER_NAMES = ["gla", "hgrn2", "rwkv6", "gsa", "simple-gla", "linear-attention", "retnet"]


@pytest.mark.parametrize("name", ADAPTER_NAMES)
def test_models_agree_with_the_naive_table(name, request):
    """Logits and every parameter's gradient of the float32 model on the chunked table within
    C·eps32·cond of the same model (same weights) on the naive table run in float64."""
    ok, why = ADAPTERS.get(name).availability()
    if not ok:
        pytest.skip(why)
    cfg = ModelConfig(adapter=name, d_model=32, d_state=8, n_layers=1, d_conv=2,
                      n_heads=1 if name == "hgrn2" else 2, expand=2)
    mqar = TASKS.get("mqar").from_params({"vocab_size": 64, "seq_len": 80, "num_facts": 4})
    torch.manual_seed(0)
    model = RecallModel(ADAPTERS.get(name)(cfg), mqar.vocab_size)  # installs SWAPS (chunked)
    x, _ = mqar.sample(3, torch.Generator().manual_seed(1))
    chunked = _logits_and_grads(model, x)
    table = _naive_table()
    assert len(table) >= 20  # gla, simple GLA, retention, RWKV-6, linear attention, GSA targets
    request.getfixturevalue("float64_references")
    model64 = model.double()  # in place: chunked holds the float32 results already
    with table.applied():
        assert "naive_recurrent_gla" in SWAPS.current("fla.layers.gla:chunk_gla").__doc__
        naive = _logits_and_grads(model64, x)
        sens = sensitivity(lambda: _logits_and_grads(model64, x), list(model64.parameters()))
    assert len(chunked) == len(naive) > 3 and naive[0].dtype == torch.float64
    assert all(a.dtype == torch.float32 for a in chunked)
    assert_within(chunked, naive, sens, C)


# ---------------------------------------------------------------------------
# benchmarks/bench_adapters.py --check-ratio
# ---------------------------------------------------------------------------
def _bench(*args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_adapters.py"), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.slow
def test_bench_prints_ratios_and_checks_them():
    out = _bench("--only", "designed", "--steps", "1", "--rounds", "2", "--check-ratio", "1e-6")
    assert out.returncode == 1, out.stderr[-2000:]
    assert "ratio to linear-mamba" in out.stdout
    assert any(ln.split()[-1] == "1.00x" for ln in out.stdout.splitlines() if ln.startswith("linear-mamba"))
    assert out.stdout.strip().splitlines()[-1].startswith("above 1e-06x linear-mamba: designed (")
    ok = _bench("--only", "designed", "--steps", "1", "--rounds", "1", "--check-ratio", "1e6")
    assert ok.returncode == 0 and "every adapter within 1e+06x linear-mamba" in ok.stdout


@pytest.mark.parametrize("flag, value, allowed", [("--check-ratio", "0", "must be > 0"),
                                                   ("--check-ratio", "nan", "must be > 0"),
                                                   ("--rounds", "0", "must be >= 1"),
                                                   ("--steps", "-1", "must be >= 1")])
def test_bench_refuses_bad_flags_in_one_line(flag, value, allowed, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_adapters

    with pytest.raises(SystemExit) as exc:
        bench_adapters.parse([flag, value])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and "\n" not in err
    assert err.startswith(f"bench_adapters.py: {flag} = ") and err.endswith(allowed), err
