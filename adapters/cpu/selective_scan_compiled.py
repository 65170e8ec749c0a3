"""Mamba-1's selective scan as a compiled loop: ``selective_scan.cpp``, built on first use.

The scan's work is a recurrence over L of elementwise products on an (N, D) state; in torch
each step is several small ops, and their dispatch, not their arithmetic, dominates.  The C++
loop runs one sequence at a time with its state in L1 cache and every inner loop vectorized
along D (float exp as a polynomial the compiler vectorizes; on x86-64 an AVX2/FMA clone is
picked at load time).  The backward recomputes the sequence's states into an (L, N, D)
scratch, so memory is O(L·N·D) per thread instead of the batch's (L, batch, N, D).

The source has no torch headers and a plain C ABI: ``c++ -O3 -shared`` builds it in about a
second, into torch's extension directory (``TORCH_EXTENSIONS_DIR`` or torch's default),
named by a hash of the source, compiler, flags and machine, so a changed source is rebuilt
and a built one is reused by every later process.  A build writes a temporary file and
renames it into place, so processes building at once each end with a complete library.
When there is no compiler or the build fails, :func:`library` warns once and returns None,
and :mod:`selective_scan_fused` keeps its torch scan.

Only B and C shared by all channels ((batch, N, L): what ``Mamba`` passes) take this path.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("selective_scan.cpp")
FLAGS = ("-O3", "-std=c++17", "-fno-trapping-math", "-fopenmp-simd", "-shared", "-fPIC")
BUILD_TIMEOUT_S = 120
SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


def build_dir() -> Path:
    from torch.utils.cpp_extension import get_default_build_root

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()) / "recallbench"


def compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


def build(directory: Path) -> Path:
    """The library for this source, compiler and flags in ``directory``, built if absent."""
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler (c++, g++ or $CXX)")
    key = b"\0".join([SOURCE.read_bytes(), cxx.encode(), " ".join(FLAGS).encode(),
                      platform.machine().encode()])
    path = directory / f"selective_scan_{hashlib.sha256(key).hexdigest()[:16]}.so"
    if path.exists():
        return path
    directory.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run([cxx, *FLAGS, str(SOURCE), "-o", str(tmp)], capture_output=True,
                              text=True, timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no message"])[0]
            raise RuntimeError(f"{Path(cxx).name} exited {done.returncode}: {first[:200]}")
        os.replace(tmp, path)  # atomic: a concurrent build of the same source is identical
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    for suffix in SUFFIX.values():
        getattr(lib, f"scan_fwd_{suffix}").argtypes = [i64] * 5 + [ptr] * 11
        getattr(lib, f"scan_bwd_{suffix}").argtypes = [i64] * 5 + [ptr] * 20
        getattr(lib, f"scan_fwd_{suffix}").restype = getattr(lib, f"scan_bwd_{suffix}").restype = None
    return lib


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL | None:
    """The loaded library, or None (one warning) when it cannot be built or loaded here."""
    try:
        return _declare(ctypes.CDLL(str(build(build_dir()))))
    except Exception as exc:  # no compiler, a failed build, an unwritable cache, no ELF loader
        warnings.warn(f"selective scan: the compiled loop is unavailable ({type(exc).__name__}: "
                      f"{str(exc)[:200]}); using the torch scan", RuntimeWarning, stacklevel=2)
        return None


@functools.lru_cache(maxsize=4)
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(workers, thread_name_prefix="selective-scan")


def _workers(batch: int) -> int:
    return max(1, min(torch.get_num_threads(), batch))


def _split(fn, batch: int, sizes: list[int], args: list) -> None:
    """``fn(b0, b1, *sizes, *pointers)`` over ranges of the batch, one per thread (ctypes
    releases the GIL); an entry of ``args`` that is a list holds one tensor per thread."""
    workers = _workers(batch)
    edges = [batch * w // workers for w in range(workers + 1)]

    def run(w: int) -> None:
        fn(edges[w], edges[w + 1], *sizes,
           *(None if a is None else (a[w] if isinstance(a, list) else a).data_ptr() for a in args))

    if workers == 1:
        run(0)
    else:
        list(_pool(workers).map(run, range(workers)))


class CompiledScan(torch.autograd.Function):
    """(Δ, u (b,L,d); Aᵀ (n,d); B, C (b,L,n); D (d,) or None; z (b,L,d) or None) →
    (out = (y + D u) SiLU(z) (b,L,d), last state (b,n,d)); zero initial state.

    All tensors contiguous, of one dtype (float32 or float64).  Training keeps every state,
    (b, L, n, d), for the backward, as mamba-ssm's reference does."""

    @staticmethod
    def forward(ctx, delta, u, AT, B, C, D, z):
        batch, L, dim = delta.shape
        n = AT.shape[0]
        out, last = torch.empty_like(delta), delta.new_empty(batch, n, dim)
        pre = torch.empty_like(delta) if z is not None else None
        states = delta.new_empty(batch, L, n, dim) if any(ctx.needs_input_grad) else None
        fn = getattr(library(), f"scan_fwd_{SUFFIX[delta.dtype]}")
        _split(fn, batch, [L, n, dim], [delta, u, AT, B, C, D, z, out, pre, last, states])
        ctx.save_for_backward(delta, u, AT, B, C, D, z, pre, states)
        return out, last

    @staticmethod
    def backward(ctx, grad_out, grad_last):
        delta, u, AT, B, C, D, z, pre, states = ctx.saved_tensors
        batch, L, dim = delta.shape
        n, workers = AT.shape[0], _workers(batch)
        g_delta, g_u, g_B, g_C = (torch.empty_like(t) for t in (delta, u, B, C))
        g_z = None if z is None else torch.empty_like(z)
        g_AT = AT.new_zeros(workers, n, dim)  # sums over the batch: one per thread
        g_D = None if D is None else D.new_zeros(workers, dim)
        carry, row = delta.new_empty(workers, n, dim), delta.new_empty(workers, 2, dim)
        fn = getattr(library(), f"scan_bwd_{SUFFIX[delta.dtype]}")
        _split(fn, batch, [L, n, dim],
               [delta, u, AT, B, C, D, z, pre, states, grad_out.contiguous(), grad_last.contiguous(),
                list(carry), list(row), g_delta, g_u, g_z, list(g_AT), g_B, g_C,
                None if g_D is None else list(g_D)])
        return (g_delta, g_u, g_AT.sum(0), g_B, g_C, None if g_D is None else g_D.sum(0), g_z)
