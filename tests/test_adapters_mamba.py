"""The mamba-ssm adapters (mamba, mamba2) and the CPU kernel swap (adapters/cpu/mamba_ssm_*.py).

Cross-checks against transformers' MambaMixer / Mamba2Mixer, whose torch code is an
independent implementation.  transformers binds its kernels when its modeling module is
first imported (to mamba-ssm's if ``import mamba_ssm`` works), so it is imported here, at
collection, before anything imports mamba_ssm; the cross-checks skip if it bound otherwise.
Everything skips, with the adapter's reason, where mamba-ssm is not installed.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from hf_kernels import hf_uses_torch

try:  # before mamba_ssm: see the module docstring
    import transformers.models.mamba.modeling_mamba as hf_mamba
    import transformers.models.mamba2.modeling_mamba2 as hf_mamba2
    from transformers import Mamba2Config, MambaConfig
except Exception:  # pragma: no cover - transformers missing or broken
    hf_mamba = hf_mamba2 = None

from recallbench.api.config import ModelConfig
from recallbench.api.errors import ConfigError
from recallbench.harness.loop import train_steps
from recallbench.harness.model import RecallModel
from recallbench.api.registry import ADAPTERS, TASKS

from recallbench.adapters.cpu import selective_scan_fused
from recallbench.adapters.cpu.mamba_ssm_import import availability, import_mamba_ssm
from recallbench.adapters.cpu.mamba_ssm_swaps import SWAPS
from recallbench.adapters.kernel_swap import resolve

AVAILABLE, REASON = availability()
needs_mamba = pytest.mark.skipif(not AVAILABLE, reason=REASON or "mamba-ssm unavailable")

PATTERNS = ("mva", "mha", "mqa", "mka")


@pytest.fixture(autouse=True)
def _one_thread():
    """Small models: one thread is faster than two here (and deterministic)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _perturb(module: torch.nn.Module, seed: int) -> None:
    """Move every parameter off its initial value, so that copied weights are really tested."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))


def _copy_by_name(src: torch.nn.Module, dst: torch.nn.Module) -> None:
    """Copy every parameter of dst from src, by name, checking names and shapes."""
    theirs = dict(src.named_parameters())
    mine = dict(dst.named_parameters())
    assert sorted(theirs) == sorted(mine), (sorted(theirs), sorted(mine))
    with torch.no_grad():
        for name, p in mine.items():
            assert p.shape == theirs[name].shape, name
            p.copy_(theirs[name])


def _out_and_input_grad(fn, x):
    x = x.detach().clone().requires_grad_(True)
    y = fn(x)
    (g,) = torch.autograd.grad(y.square().sum(), x)
    return y.detach(), g


def _assert_swapped_matches(ours, ref, x):
    """``ours`` under the CPU swap and the independent ``ref``: same outputs, same input grads."""
    def run_ours(t):
        with SWAPS.applied():
            return ours(t)

    y1, g1 = _out_and_input_grad(run_ours, x)
    y2, g2 = _out_and_input_grad(ref, x)
    torch.testing.assert_close(y1, y2, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-5)


# -- (0) imports and options -------------------------------------------------------------

def test_adapters_import_and_report_without_mamba_ssm():
    """With mamba_ssm hidden, the adapters still import and say why they are unavailable."""
    code = textwrap.dedent("""
        import sys
        sys.modules["mamba_ssm"] = None  # as if not installed: find_spec None, import fails
        from recallbench.api.registry import ADAPTERS
        for name in ("mamba", "mamba2"):
            ok, why = ADAPTERS.get(name).availability()
            print(name, ok, why)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert [line.split()[:2] for line in lines] == [["mamba", "False"], ["mamba2", "False"]]
    assert all("mamba-ssm is not installed" in line for line in lines)


@pytest.mark.parametrize("adapter, model, field", [
    ("mamba", {"options": {"dt_rnk": 2}}, "model.options.dt_rnk"),
    ("mamba", {"options": {"dt_rank": 0}}, "model.options.dt_rank"),
    ("mamba", {"n_heads": 2}, "model.n_heads"),
    ("mamba2", {"options": {"chunk": 64}}, "model.options.chunk"),
    ("mamba2", {"options": {"chunk_size": "big"}}, "model.options.chunk_size"),
    ("mamba2", {"options": {"chunk_size": 0}}, "model.options.chunk_size"),
    ("mamba2", {"n_heads": 3}, "model.n_heads"),
    ("mamba", {"head_pattern": "mqa"}, "model.head_pattern"),
])
def test_bad_options_name_the_field(adapter, model, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        ADAPTERS.get(adapter)(ModelConfig(adapter=adapter, **model))


# -- (1) the swapped mamba-ssm layers against transformers' -------------------------------

@needs_mamba
@pytest.mark.skipif(hf_mamba is None, reason="transformers' Mamba is not importable")
def test_mamba_matches_transformers_mamba_mixer():
    if not hf_uses_torch(hf_mamba.mamba_selective_scan):
        pytest.skip("transformers bound its Mamba scan to mamba-ssm (imported before transformers)")
    ms = import_mamba_ssm()
    torch.manual_seed(0)
    ours = ms.Mamba(16, d_state=8, d_conv=3, expand=2)
    _perturb(ours, 1)
    cfg = MambaConfig(hidden_size=16, state_size=8, conv_kernel=3, expand=2,
                      time_step_rank=ours.dt_rank, use_conv_bias=True, use_bias=False,
                      num_hidden_layers=1)
    ref = hf_mamba.MambaMixer(cfg, layer_idx=0)
    _copy_by_name(ours, ref)  # same parameterisation: in_proj, conv1d, x_proj, dt_proj, A_log, D, out_proj
    x = torch.randn(2, 21, 16, generator=torch.Generator().manual_seed(2))
    _assert_swapped_matches(ours, ref, x)


@needs_mamba
@pytest.mark.skipif(hf_mamba2 is None, reason="transformers' Mamba2 is not importable")
@pytest.mark.parametrize("ngroups", [1, 4])
@pytest.mark.parametrize("mem_eff", [True, False])
def test_mamba2_matches_transformers_mamba2_mixer(ngroups, mem_eff):
    if not hf_uses_torch(hf_mamba2.mamba2_chunk_scan):
        pytest.skip("transformers bound its Mamba-2 scan to mamba-ssm (imported before transformers)")
    ms = import_mamba_ssm()
    torch.manual_seed(0)
    d, nheads, headdim = 16, 4, 8
    ours = ms.Mamba2(d, d_state=8, d_conv=3, expand=2, headdim=headdim, ngroups=ngroups,
                     chunk_size=8, use_mem_eff_path=mem_eff)
    _perturb(ours, 3)
    # transformers: same names and layout (in_proj = [z, x, B, C, dt]); its gated norm is
    # RMSNorm(y · SiLU(z)) in groups of d_inner / n_groups = mamba-ssm's norm_before_gate=False
    assert ours.norm.norm_before_gate is False and ours.norm.group_size == 2 * d // ngroups
    cfg = Mamba2Config(hidden_size=d, state_size=8, conv_kernel=3, expand=2, num_heads=nheads,
                       head_dim=headdim, n_groups=ngroups, chunk_size=8, use_conv_bias=True,
                       use_bias=False, layer_norm_epsilon=ours.norm.eps, num_hidden_layers=1,
                       time_step_limit=(0.0, float("inf")))
    ref = hf_mamba2.Mamba2Mixer(cfg, layer_idx=0)
    _copy_by_name(ours, ref)
    x = torch.randn(2, 21, d, generator=torch.Generator().manual_seed(4))  # 21: not a chunk multiple
    _assert_swapped_matches(ours, ref, x)


@needs_mamba
@pytest.mark.parametrize("bc_dims", [2, 3, 4])
@pytest.mark.parametrize("extras", [True, False])
def test_selective_scan_cpu_equals_selective_scan_ref(bc_dims, extras):
    """The swap's faster scan is mamba-ssm's selective_scan_ref, values and gradients."""
    import_mamba_ssm()
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref

    g = torch.Generator().manual_seed(bc_dims)
    b, d, n, L = 2, 6, 3, 13
    bc_shape = {2: (d, n), 3: (b, n, L), 4: (b, 2, n, L)}[bc_dims]
    ts = [torch.randn(b, d, L, generator=g), torch.randn(b, d, L, generator=g),
          -torch.rand(d, n, generator=g), torch.randn(*bc_shape, generator=g),
          torch.randn(*bc_shape, generator=g), torch.randn(d, generator=g),
          torch.randn(b, d, L, generator=g), torch.randn(d, generator=g)]
    ts = [t.requires_grad_() for t in ts]
    kw = dict(D=ts[5], z=ts[6], delta_bias=ts[7], delta_softplus=True) if extras else {}
    results = []
    for fn in (selective_scan_ref, selective_scan_fused.selective_scan_cpu):
        y, last = fn(*ts[:5], return_last_state=True, **kw)
        grads = torch.autograd.grad(y.square().sum() + last.sum(), ts, allow_unused=True)
        results.append((y, last, grads))
    (y1, s1, g1), (y2, s2, g2) = results
    torch.testing.assert_close(y1, y2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(s1, s2, rtol=1e-5, atol=1e-6)
    for a, c in zip(g1, g2):
        assert (a is None) == (c is None)
        if a is not None:  # float32 summed in another order: scale atol by the gradient's size
            torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6 * c.abs().max().item())


@needs_mamba
def test_chunk_scan_cpu_matches_mamba2_step_recurrence():
    """The SSD reference (chunked, with a final state) equals the token-by-token recurrence."""
    ms = import_mamba_ssm()
    torch.manual_seed(0)
    m = ms.Mamba2(16, d_state=8, d_conv=2, expand=2, headdim=8, ngroups=1, chunk_size=4)
    _perturb(m, 5)
    x = torch.randn(2, 11, 16, generator=torch.Generator().manual_seed(6))
    with torch.no_grad(), SWAPS.applied():
        full = m(x)
        conv_state, ssm_state = m.allocate_inference_cache(2, 11)
        steps = [m.step(x[:, t:t + 1], conv_state, ssm_state)[0] for t in range(11)]
    torch.testing.assert_close(full, torch.cat(steps, dim=1), rtol=1e-4, atol=1e-5)


# -- (2) the swap is explicit and reversible ----------------------------------------------

@needs_mamba
def test_swap_is_reversible():
    import_mamba_ssm()
    originals = {s.target: SWAPS.current(s.target) for s in SWAPS}
    assert len(originals) == len(SWAPS)  # one swap per target
    assert not SWAPS.installed()
    with SWAPS.applied():
        assert SWAPS.installed()
        swapped = {s.target: SWAPS.current(s.target) for s in SWAPS}
        for s in SWAPS:
            want = getattr(*resolve(s.replacement)) if isinstance(s.replacement, str) else s.replacement
            assert swapped[s.target] is want, s.target
        with SWAPS.applied():  # nested: still swapped inside, and after the inner exit
            pass
        assert all(SWAPS.current(t) is now for t, now in swapped.items())
    for target, old in originals.items():
        assert SWAPS.current(target) is old, f"{target} not restored"
    assert not SWAPS.installed()
    # the selective scan really was the CUDA one, and comes back
    from mamba_ssm.modules import mamba_simple
    from mamba_ssm.ops import selective_scan_interface as ssi

    assert mamba_simple.selective_scan_fn is ssi.selective_scan_fn  # the CUDA extension's wrapper
    assert mamba_simple.selective_scan_fn is not ssi.selective_scan_ref
    with pytest.raises(RuntimeError, match="uninstall"):
        SWAPS.uninstall()


@needs_mamba
def test_swap_restored_after_a_failing_forward_and_conv_falls_back():
    from mamba_ssm.modules import mamba2 as m2
    from mamba_ssm.modules import mamba_simple

    # causal-conv1d is not installed here: the modules use their nn.Conv1d fallback
    if importlib.util.find_spec("causal_conv1d") is None:
        assert mamba_simple.causal_conv1d_fn is None and m2.causal_conv1d_fn is None
    before = m2.mamba_split_conv1d_scan_combined
    adapter = ADAPTERS.get("mamba2")(ModelConfig(adapter="mamba2", d_model=16, d_state=4))
    model = RecallModel(adapter, 16)
    with pytest.raises(ValueError):
        model(torch.zeros(2, 5, 3, dtype=torch.long))  # wrong shape: fails inside the swap
    assert not SWAPS.installed() and m2.mamba_split_conv1d_scan_combined is before
    model(torch.zeros(2, 5, dtype=torch.long))
    assert not SWAPS.installed() and m2.mamba_split_conv1d_scan_combined is before


# -- (3) every adapter trains on a small MQAR ------------------------------------------------

TRAIN_CASES = [("mamba", None, 1)] + [("mamba2", p, 4) for p in PATTERNS]


@needs_mamba
@pytest.mark.parametrize("adapter, pattern, heads", TRAIN_CASES)
def test_adapter_trains_on_small_mqar(adapter, pattern, heads):
    task = TASKS.get("mqar").from_params({"vocab_size": 32, "seq_len": 32, "num_facts": 4})
    cfg = ModelConfig(adapter=adapter, d_model=32, d_state=8, n_layers=2, n_heads=heads,
                      head_pattern=pattern, options={"chunk_size": 16} if adapter == "mamba2" else {})
    torch.manual_seed(0)
    model = RecallModel(ADAPTERS.get(adapter)(cfg), task.vocab_size)
    losses = train_steps(model, task, steps=40, batch_size=32, lr=5e-3, seed=0)
    assert all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.3, (first, last)
    assert not SWAPS.installed()


# -- (4) the state size is what the built modules hold ------------------------------------------

def _real_state(blocks) -> int:
    """SSM state scalars per sequence, from the built mixers' own attributes."""
    from mamba_ssm import Mamba as SSMMamba
    from mamba_ssm import Mamba2 as SSMMamba2

    from recallbench.adapters.mamba2 import SharedXMamba2

    total = 0
    for block in blocks:
        mixer = block.mixer
        if isinstance(mixer, SSMMamba):
            total += mixer.d_inner * mixer.d_state
        elif isinstance(mixer, SSMMamba2):
            assert mixer.nheads * mixer.headdim == mixer.d_ssm
            total += mixer.nheads * mixer.headdim * mixer.d_state
        elif isinstance(mixer, SharedXMamba2):
            # x and (mqa) B and Δ shared: one P×N state; mka: B per head → one per head
            shared = mixer.b_heads == 1 and mixer.dt_heads == 1 and mixer.x_dim == mixer.headdim
            total += (1 if shared else mixer.nheads) * mixer.headdim * mixer.d_state
        else:
            raise AssertionError(type(mixer))
    return total


@needs_mamba
@pytest.mark.parametrize("adapter, pattern, heads", TRAIN_CASES + [("mamba2", "mqa", 1)])
@pytest.mark.parametrize("layers", [1, 3])
def test_state_size_matches_built_module(adapter, pattern, heads, layers):
    cfg = ModelConfig(adapter=adapter, d_model=24, d_state=6, n_layers=layers, n_heads=heads,
                      expand=2, head_pattern=pattern)
    a = ADAPTERS.get(adapter)(cfg)
    blocks = a.build_blocks(torch.device("cpu"))
    assert len(blocks) == layers
    assert a.state_size() == _real_state(blocks)
    expected = layers * 2 * 24 * 6 // (heads if pattern == "mqa" else 1)
    assert a.state_size() == expected
    assert a.library_class and a.state_formula and a.description


@needs_mamba
def test_mamba2_layers_by_pattern():
    from mamba_ssm import Mamba2 as SSMMamba2

    from recallbench.adapters.mamba2 import SharedXMamba2

    def mixer(pattern):
        cfg = ModelConfig(adapter="mamba2", d_model=16, d_state=4, n_heads=4, head_pattern=pattern)
        return ADAPTERS.get("mamba2")(cfg).build_blocks(torch.device("cpu"))[0].mixer

    assert isinstance(mixer("mva"), SSMMamba2) and mixer("mva").ngroups == 1
    assert isinstance(mixer("mha"), SSMMamba2) and mixer("mha").ngroups == 4
    assert mixer("mha").nheads == 4 and mixer("mha").headdim == 8
    assert isinstance(mixer("mqa"), SharedXMamba2) and isinstance(mixer("mka"), SharedXMamba2)
    assert ADAPTERS.get("mamba2")(ModelConfig(adapter="mamba2")).head_pattern == "mva"


# -- (5) the shared-x layer is Mamba2 where the two coincide ------------------------------------

def _as_mamba2_mha(own, ms):
    """A mamba_ssm.Mamba2 with ngroups = nheads computing exactly what ``own`` computes:
    the shared x (and, for mqa, B, Δ, A; for mka, C) copied into every head."""
    H, P, N = own.nheads, own.headdim, own.d_state
    m = ms.Mamba2(own.d_model, d_state=N, d_conv=own.d_conv, expand=own.expand, headdim=P,
                  ngroups=H, chunk_size=own.chunk_size)

    def tile(t, heads):  # rows of one head (or of all heads) → rows of H heads, head-major
        return t if heads == H else t.repeat(H, *([1] * (t.dim() - 1)))

    w = own.in_proj.weight
    z, x, B, C, dt = torch.split(w, [own.d_inner, own.x_dim, own.b_heads * N, own.c_heads * N,
                                     own.dt_heads])
    cw, cb = own.conv1d.weight, own.conv1d.bias
    cx, cB, cC = torch.split(cw, [own.x_dim, own.b_heads * N, own.c_heads * N])
    bx, bB, bC = torch.split(cb, [own.x_dim, own.b_heads * N, own.c_heads * N])
    with torch.no_grad():
        m.in_proj.weight.copy_(torch.cat([z, tile(x, 1), tile(B, own.b_heads), tile(C, own.c_heads),
                                          tile(dt, own.dt_heads)]))
        m.conv1d.weight.copy_(torch.cat([tile(cx, 1), tile(cB, own.b_heads), tile(cC, own.c_heads)]))
        m.conv1d.bias.copy_(torch.cat([tile(bx, 1), tile(bB, own.b_heads), tile(bC, own.c_heads)]))
        m.dt_bias.copy_(tile(own.dt_bias, own.dt_heads))
        m.A_log.copy_(tile(own.A_log, own.dt_heads))
        m.D.copy_(own.D)
        m.norm.weight.copy_(own.norm.weight)
        m.out_proj.weight.copy_(own.out_proj.weight)
    return m


@needs_mamba
@pytest.mark.parametrize("pattern", ["mqa", "mka"])
@pytest.mark.parametrize("nheads", [1, 4])
def test_shared_x_layer_equals_mamba2_where_they_coincide(pattern, nheads):
    ms = import_mamba_ssm()
    from recallbench.adapters.mamba2 import SharedXMamba2

    torch.manual_seed(0)
    # Mamba2 with ngroups = nheads normalises y in groups of headdim: match it
    own = SharedXMamba2(16, 8, 3, 2, nheads, pattern, chunk_size=8, norm_groups=nheads)
    _perturb(own, 7)
    ref = _as_mamba2_mha(own, ms)
    x = torch.randn(2, 19, 16, generator=torch.Generator().manual_seed(8))
    with SWAPS.applied():
        y1, g1 = _out_and_input_grad(own, x)
        y2, g2 = _out_and_input_grad(ref, x)
    torch.testing.assert_close(y1, y2, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-5)
    # and it is not trivially so: the other shared-x pattern computes something else
    if nheads > 1:
        other = SharedXMamba2(16, 8, 3, 2, nheads, "mka" if pattern == "mqa" else "mqa",
                              chunk_size=8, norm_groups=nheads)
        assert other.in_proj.weight.shape != own.in_proj.weight.shape
