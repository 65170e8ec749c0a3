"""Keep freed memory in the process's heap between training steps (glibc, Linux).

    keep_freed_memory()      # once per process, before a CPU run trains; True when set

Why.  A training step on CPU allocates and frees the same few buffers of several MiB each
step: the read-out's logits (B·N_f × V floats), their gradients, the chunked scan's blocks.
glibc's malloc serves an allocation above its mmap threshold with a fresh ``mmap`` and gives
freed memory at the top of its heap back to the kernel above its trim threshold, so every
step touches new pages and pays a page fault per 4 KiB page.  For linear-mamba at D = 32,
N_f = 26 and 38 that was 1,200 to 1,650 faults per step; with the settings below it is
about 15, and a step takes 11% to 21% less CPU time (``python benchmarks/bench_heap.py``;
linear-mamba's D32-N8 capacity card, 6% less).

What.  Three ``mallopt`` settings, the ones glibc documents for this (``man mallopt``):

* ``M_MMAP_THRESHOLD`` 32 MiB (glibc's largest): buffers up to that come from the heap;
* ``M_TOP_PAD`` 64 MiB: the heap grows, and is trimmed, in steps that keep that much spare;
* ``M_TRIM_THRESHOLD`` 1 GiB: freed memory stays in the process to be reused.

Nothing computed changes: the same buffers, at the same alignment (torch's CPU allocator
asks for 64-byte alignment either way), hold the same numbers.  The cost is that a process
keeps the memory of its largest step until it exits (or calls ``malloc_trim``).  Off glibc
(macOS, musl) it does nothing.  ``RECALLBENCH_KEEP_HEAP=0`` leaves malloc's defaults (for
``benchmarks/bench_heap.py``, and for a host process that must return memory early).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's <malloc.h>
MIB = 1 << 20
SETTINGS = ((M_MMAP_THRESHOLD, 32 * MIB), (M_TOP_PAD, 64 * MIB), (M_TRIM_THRESHOLD, 1024 * MIB))
ENV = "RECALLBENCH_KEEP_HEAP"

_state: bool | None = None  # None: not tried yet in this process


def keep_freed_memory() -> bool:
    """Apply :data:`SETTINGS` once per process; whether they are in effect."""
    global _state
    if _state is None:
        _state = _apply()
    return _state


def _apply() -> bool:
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # mallopt returns 1 on success; glibc refuses an M_MMAP_THRESHOLD above its maximum
    return all(mallopt(param, value) == 1 for param, value in SETTINGS)
