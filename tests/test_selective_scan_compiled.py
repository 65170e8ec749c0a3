"""The compiled selective scan (adapters/cpu/selective_scan.cpp): equal to the torch scan, and
its build: cached, reused, safe with concurrent builders, and a warned fallback without it.

The torch scan is itself checked against mamba-ssm's ``selective_scan_ref`` and a float64
loop (tests/test_mamba_kernels.py), as is the compiled one there.  Here float32 scans are
bounded against the torch scan run in float64 on the same inputs, by the scan's own
conditioning measured there (tests/float_bounds.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from float_bounds import C, assert_within, sensitivity

from recallbench.adapters.cpu import selective_scan_compiled as sc
from recallbench.adapters.cpu.selective_scan_fused import selective_scan_cpu

pytestmark = pytest.mark.parity


@pytest.fixture
def fresh_library():
    """library() forgets what it loaded, before and after the test."""
    sc.library.cache_clear()
    yield
    sc.library.cache_clear()


def needs_library():
    if sc.library() is None:
        pytest.skip("the compiled scan does not build here")


def inputs(b=3, d=10, n=5, L=19, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    u, delta, z = (torch.randn(b, d, L, generator=g, dtype=dtype) for _ in range(3))
    A = -torch.rand(d, n, generator=g, dtype=dtype) * 20
    B, C = (torch.randn(b, n, L, generator=g, dtype=dtype) for _ in range(2))
    D, bias = torch.randn(d, generator=g, dtype=dtype), torch.linspace(-3, 1, d, dtype=dtype)
    return [t.requires_grad_() for t in (u, delta, A, B, C, D, z, bias)]


def run(ts, use_D, use_z, softplus):
    u, delta, A, B, C, D, z, bias = ts
    if not softplus:  # a positive Δ without softplus, and no bias
        delta, bias = delta.abs(), None
    out, last = selective_scan_cpu(u, delta, A, B, C, D if use_D else None, z if use_z else None,
                                   bias, delta_softplus=softplus, return_last_state=True)
    weights = torch.linspace(-1, 1, out.shape[-1]).to(out.dtype)  # the same values in either dtype
    loss = (out * weights).square().sum() + last.sum()
    used = [True] * 5 + [use_D, use_z, softplus]
    grads = torch.autograd.grad(loss, [t for t, on in zip(ts, used) if on])
    return [out, last, *grads]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("use_D, use_z, softplus", [(True, True, True), (False, False, False),
                                                    (True, False, True), (False, True, False)])
def test_compiled_scan_equals_torch_scan(dtype, use_D, use_z, softplus, monkeypatch):
    """float64: the compiled and the torch scan agree to 1e-13.  float32: both within
    C·eps32·cond of the torch scan run in float64 on the same inputs."""
    needs_library()
    ts = inputs(dtype=dtype)
    compiled = run(ts, use_D, use_z, softplus)
    monkeypatch.setattr(sc, "library", lambda: None)
    torch_scan = run(ts, use_D, use_z, softplus)
    assert len(compiled) == len(torch_scan) == 2 + 5 + use_D + use_z + softplus
    assert all(a.dtype == dtype for a in compiled + torch_scan)
    if dtype == torch.float32:  # the torch scan (library() is None now) in float64
        ts64 = [t.detach().double().requires_grad_() for t in ts]
        ref = run(ts64, use_D, use_z, softplus)
        sens = sensitivity(lambda: run(ts64, use_D, use_z, softplus), ts64)
        assert_within(compiled, ref, sens, C)
        assert_within(torch_scan, ref, sens, C)
        return
    for i, (a, b) in enumerate(zip(compiled, torch_scan)):
        err = ((a - b).abs().max() / b.abs().max()).item()
        assert err <= 1e-13, (i, err)


def test_compiled_scan_splits_the_batch_over_threads_and_runs_without_grad(monkeypatch):
    """One thread and three: both within C·eps32·cond of the torch scan in float64; without
    grad the output is the one of the training call, bit for bit."""
    needs_library()
    ts = inputs(b=5)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run(ts, True, True, True)
        torch.set_num_threads(3)  # 5 sequences in ranges of 1, 2, 2
        three = run(ts, True, True, True)
        with torch.no_grad():  # no states kept
            out = selective_scan_cpu(*ts[:5], ts[5], ts[6], ts[7], delta_softplus=True)
    finally:
        torch.set_num_threads(old)
    torch.testing.assert_close(out, one[0], rtol=0, atol=0)
    assert all(t.dtype == torch.float32 for t in one + three)
    monkeypatch.setattr(sc, "library", lambda: None)
    ts64 = [t.detach().double().requires_grad_() for t in ts]
    ref = run(ts64, True, True, True)
    sens = sensitivity(lambda: run(ts64, True, True, True), ts64)
    assert_within(one, ref, sens, C)
    assert_within(three, ref, sens, C)


def test_no_compiler_warns_once_and_the_torch_scan_runs(fresh_library, monkeypatch):
    monkeypatch.setattr(sc, "compiler", lambda: None)
    with pytest.warns(RuntimeWarning, match=r"compiled loop is unavailable \(RuntimeError: no C\+\+ compiler"):
        assert sc.library() is None
    ts = inputs()
    out = selective_scan_cpu(*ts[:7], ts[7], delta_softplus=True)  # no second warning: cached
    assert out.shape == ts[0].shape and torch.isfinite(out).all()


def test_failed_build_warns_with_the_compilers_status(fresh_library, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")
    with pytest.warns(RuntimeWarning, match="false exited 1"):
        assert sc.library() is None
    assert list((tmp_path / "recallbench").iterdir()) == []  # no partial library left


def test_build_is_cached_by_source_and_reused(tmp_path):
    if sc.compiler() is None:
        pytest.skip("no C++ compiler")
    first = sc.build(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert sc.build(tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]


@pytest.mark.slow
def test_two_processes_building_at_once_both_load_one_library(tmp_path):
    """Fresh cache, two interpreters build and use the library at the same time."""
    if sc.compiler() is None:
        pytest.skip("no C++ compiler")
    script = textwrap.dedent("""
        import torch, warnings
        warnings.simplefilter("error")
        from recallbench.adapters.cpu import selective_scan_compiled as sc
        from recallbench.adapters.cpu.selective_scan_fused import selective_scan_cpu
        assert sc.library() is not None
        u, dt, z = torch.randn(3, 2, 4, 7).unbind(0)
        A, B = -torch.rand(4, 3), torch.randn(2, 3, 7)
        out = selective_scan_cpu(u, dt, A, B, B, z=z, delta_softplus=True)
        print("ok", float(out.abs().sum()) > 0)
    """)
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and out.strip() == "ok True", err[-2000:]
    built = sorted(p.name for p in (tmp_path / "recallbench").iterdir())
    assert len(built) == 1 and built[0].endswith(".so"), built
