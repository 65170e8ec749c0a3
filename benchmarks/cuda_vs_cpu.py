"""Each adapter's CUDA path against its CPU reference path, on the same weights and inputs.

    python benchmarks/cuda_vs_cpu.py [--only NAME ...] [--device cuda] [--batch 8] [--d-model 64]
                                     [--d-state 16] [--seq-len L] [--reps 5] [--out FILE.jsonl]
                                     [--time-limit 600] [--triton-f32 ieee|default|tf32] [--jobs 1]

For every adapter available here it builds the model for the CPU (the pure-torch
references: mamba-ssm's selective_scan_ref / ssd_minimal_discrete, fla's naive ops)
and for CUDA (the fused kernels: selective scan, SSD, Triton), copies the CPU weights
into the CUDA model, runs forward and backward on the same tokens, and prints the
largest relative difference of the logits and of the gradients, and ms per
forward+backward on each path.  A gradient gap is given in two measures: against the
parameter's own gradient and against the model's overall gradient scale (the largest
gradient entry of any parameter), each with the parameter where it is largest.  A
gradient that nearly cancels (mamba2's ``dt_bias``) has a large gap of the first kind
from the summation order alone.

torch's TF32 is switched off; Triton's ``tl.dot`` is not switched by it and uses TF32 for
float32 inputs unless ``TRITON_F32_DEFAULT=ieee`` (``--triton-f32 ieee``; a parity check
should use it).  Every row records ``torch_allow_tf32`` and ``TRITON_F32_DEFAULT``.

Each adapter runs in a fresh process, killed after ``--time-limit`` seconds (its row then
says so).  ``--out`` appends one JSON object per adapter to FILE (JSON lines), written and
flushed as each adapter finishes.  ``--jobs N`` runs N adapters' processes at once (the
gaps are the same; the timings then share the device and the CPUs, and each row records
``jobs``).  With no CUDA device it says so and exits 0.
``--device cpu`` is a dry run: the "other" path is then the libraries' Triton kernels under
Triton's interpreter for the adapters whose kernels are Triton (benchmarks/kernel_parity.py;
slow, no timings), and the same CPU path for the others (``other_path`` says which).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from kernel_parity import (TRITON_ADAPTERS, Parser, build, fwd_bwd, gaps, interpreter_env, json_lines,
                           library_kernels, patch_interpreter, precision_settings)  # benchmarks/
from selection import runnable_adapters  # benchmarks/selection.py


def timed(model, x, y, device: str, reps: int) -> float:
    import torch

    fwd_bwd(model, x, y)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fwd_bwd(model, x, y)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e3


def other_path(name: str, device: str) -> str:
    if device != "cpu":
        return f"{device} kernels"
    return "triton interpreter" if name in TRITON_ADAPTERS else "same cpu path"


def compare(name: str, device: str, args) -> dict:
    """One adapter's row: the CPU path against the other path (see :func:`other_path`)."""
    import torch

    path = other_path(name, device)
    cfg, ref = build(name, "cpu", args.d_model, args.d_state, args.seq_len)
    x, y = cfg.task.sample(args.batch, torch.Generator().manual_seed(0))
    logits_ref, grads_ref = fwd_bwd(ref, x, y)
    if path == "triton interpreter":  # the same model, its library's kernels interpreted
        patch_interpreter()
        with library_kernels(name, ref):
            logits, grads = fwd_bwd(ref, x, y)
        fast, fast_ms = None, None
    else:
        _, fast = build(name, device, args.d_model, args.d_state, args.seq_len)
        fast.load_state_dict(ref.state_dict())
        logits, grads = fwd_bwd(fast, x.to(device), y.to(device))
        fast_ms = timed(fast, x.to(device), y.to(device), device, args.reps)
    found = gaps(logits_ref, grads_ref, logits, grads)
    found.pop("params")
    return {"adapter": name, "device": device_name(device), "other_path": path, **found,
            "cpu_ms": timed(ref, x, y, "cpu", args.reps), "other_ms": fast_ms, **precision_settings()}


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"


def show(row: dict) -> str:
    if "error" in row:
        return f"{row['adapter']:<18} FAILED {row['error']}"
    other = "" if row["other_ms"] is None else f"  other {row['other_ms']:8.2f} ms"
    return (f"{row['adapter']:<18} logits {row['logits_rel_diff']:.2e}  grads {row['grad_rel_diff']:.2e}"
            f" ({row['worst_param_own']})  overall {row['grad_rel_diff_overall']:.2e}"
            f" ({row['worst_param_overall']})  cpu {row['cpu_ms']:8.1f} ms{other}")


def worker_env(name: str, args) -> dict:
    """The environment of an adapter's process: the Triton interpreter for a dry run of a Triton
    adapter, and TRITON_F32_DEFAULT as ``--triton-f32`` says (unset: as inherited)."""
    if other_path(name, args.device) == "triton interpreter":
        return interpreter_env(args.triton_f32 or os.environ.get("TRITON_F32_DEFAULT") or "default")
    env = dict(os.environ)
    if args.triton_f32 == "default":
        env.pop("TRITON_F32_DEFAULT", None)
    elif args.triton_f32:
        env["TRITON_F32_DEFAULT"] = args.triton_f32
    return env


def run_one(name: str, argv: list[str], args) -> dict:
    """``compare`` in a fresh process, killed after ``--time-limit`` seconds."""
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--worker", name]
    rows, why = json_lines(cmd, worker_env(name, args), args.time_limit)
    return {**(rows[-1] if rows else {"adapter": name, "error": why}), "jobs": args.jobs}


def parse(argv):
    ap = Parser(prog=os.path.basename(__file__), description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--d-state", type=int, default=16)
    ap.add_argument("--seq-len", type=int, help="task length (default: the task's)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", help="JSON lines, one per adapter, appended as each finishes")
    ap.add_argument("--time-limit", type=float, default=600.0, help="seconds per adapter")
    ap.add_argument("--triton-f32", choices=("ieee", "default", "tf32"),
                    help="TRITON_F32_DEFAULT for the adapters' processes (default: as inherited)")
    ap.add_argument("--jobs", type=int, default=1, help="adapters run at once (1)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for flag in ("batch", "d_model", "d_state", "reps", "time_limit", "seq_len", "jobs"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            ap.error(f"--{flag.replace('_', '-')} must be > 0")
    return args


def worker(args) -> int:
    """Inside an adapter's process: print its row as one JSON line."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(1)
    try:
        row = compare(args.worker, args.device, args)
    except Exception as exc:  # one failing path must not hide the others
        row = {"adapter": args.worker, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    print(json.dumps(row), flush=True)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    if args.worker:
        return worker(args)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: nothing to compare (use --device cpu for a dry run)")
        return 0
    if args.out:
        try:
            open(args.out, "a").close()
        except OSError as exc:
            print(f"--out {args.out}: cannot write ({exc.strerror})", file=sys.stderr)
            return 2
    names = list(runnable_adapters(args.only, word="skipped"))
    with ThreadPoolExecutor(args.jobs) as pool:  # each job waits on its own process
        for done in as_completed([pool.submit(run_one, n, argv, args) for n in names]):
            row = done.result()  # written as each finishes: a step killed midway keeps them
            print(show(row), flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
