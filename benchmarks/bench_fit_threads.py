"""A card's N50 fit with BLAS on one thread (``law.blas.one_thread``, as ``runfit`` runs it)
against BLAS on every thread, in one process.

    python benchmarks/bench_fit_threads.py [--runs 16] [--rounds 5] [--threads 0]

The runs are a synthetic card's (``synthetic_cards``: N50 = 12, slope 1.4, run SD 0.3, 2
runs per cell at N_f 6 to 24).  Each round fits them with ``runfit.fit_runs`` (the estimate
and its profile interval) once as the library does and once with its limit lifted
(``one_thread`` replaced by a no-op and BLAS at ``--threads``, 0: as many as it has); the
rows give the median CPU and wall seconds per fit, and the ratio of the medians.  The
estimates must agree: the same optimiser on the same numbers.  The ratio depends on how busy
the machine is (the threads' wake-ups are what costs).
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

import synthetic_cards as synth  # noqa: E402
from recallbench.law import runfit  # noqa: E402
from recallbench.runs import capacity  # noqa: E402

BASE = {"task": {"name": "mqar", "vocab_size": 512},
        "model": {"adapter": "linear-mamba", "d_model": 32, "d_state": 4},
        "train": dict(capacity.TRAIN)}


def card_runs(n: int) -> dict:
    truth = synth.Truth(n50=12.0, slope=1.4, tau=0.3, failure_rate=0.0)
    cells = np.unique(np.round(np.geomspace(6, 24, max(n // 2, 2))).astype(int))
    cfgs = [capacity.cell_config(BASE, int(nf), s) for nf in cells for s in (0, 1)][:n]
    recs = synth.runner(truth, np.random.default_rng(0))(cfgs)
    nf = np.array([r["config"]["task"]["num_facts"] for r in recs], float)
    k = np.array([r["correct"] for r in recs], float)
    tot = np.array([r["total"] for r in recs], float)
    return {"num_facts": nf, "correct": k, "total": tot, "units": tot / nf, "guess": 1.0 / nf}


def timed(args: dict) -> tuple[float, float, runfit.RunFit]:
    c0, w0 = time.process_time(), time.perf_counter()
    f = runfit.fit_runs(**args)
    return time.process_time() - c0, time.perf_counter() - w0, f


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.runs < 4 or a.rounds < 1 or a.threads < 0:
        p.error("--runs must be >= 4, --rounds >= 1, --threads >= 0")
    args = card_runs(a.runs)
    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    print(f"{a.runs} runs, {a.rounds} rounds; BLAS: "
          + ", ".join(f"{i['internal_api']} {i['num_threads']} threads" for i in blas))
    one, many = [], []
    keep = runfit.one_thread
    for _ in range(a.rounds):
        one.append(timed(args))
        runfit.one_thread = contextlib.nullcontext
        try:
            with threadpool_limits(a.threads or None, user_api="blas"):
                many.append(timed(args))
        finally:
            runfit.one_thread = keep
    for name, rows in (("one BLAS thread (the library)", one), ("every BLAS thread", many)):
        print(f"{name:<32} CPU {statistics.median(r[0] for r in rows):7.3f} s   "
              f"wall {statistics.median(r[1] for r in rows):7.3f} s per fit")
    cpu = statistics.median(r[0] for r in many) / statistics.median(r[0] for r in one)
    wall = statistics.median(r[1] for r in many) / statistics.median(r[1] for r in one)
    print(f"ratio (every / one): CPU {cpu:.2f}x, wall {wall:.2f}x")
    same = all(abs(x[2].n50 - y[2].n50) <= 1e-6 * x[2].n50 for x, y in zip(one, many))
    print("estimates agree" if same else "ESTIMATES DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
