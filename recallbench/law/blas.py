"""Small optimisations on one BLAS thread.

    with one_thread():
        optimize.minimize(f, x0, method="L-BFGS-B", bounds=...)

L-BFGS-B (scipy) calls BLAS on vectors of a few numbers at every iteration; a
multi-threaded OpenBLAS hands each call to its threads, whose wake-ups then cost more than
the fit, most on a busy machine (``benchmarks/bench_fit_threads.py`` prints the ratio).
The limit holds inside the block only (``threadpoolctl``), so a caller's numpy and torch
keep their threads.
"""
from __future__ import annotations

import contextlib
import functools


@functools.lru_cache(maxsize=1)
def _controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()  # the BLAS libraries loaded by now (numpy's, scipy's)


@contextlib.contextmanager
def one_thread():
    """BLAS limited to one thread inside the block."""
    with _controller().limit(limits=1, user_api="blas"):
        yield
