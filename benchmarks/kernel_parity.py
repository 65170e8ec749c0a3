"""The libraries' own Triton kernels, run by Triton's interpreter on a CPU, against recallbench's CPU path.

    python benchmarks/kernel_parity.py [--only NAME ...] [--dot ieee|default|tf32 ...] [--batch 2]
                                       [--seq-len 32] [--d-model 32] [--d-state 16] [--ssd-chunk N]
                                       [--time-limit 600]

On a CPU, recallbench swaps fla's and mamba-ssm's kernels for pure-torch references
(``adapters/cpu/``).  This script checks those references against the kernels they stand
in for, with no GPU: for each adapter whose library kernels are Triton (every fla adapter,
and mamba2's SSD scan) it runs one model forward and backward twice on the same weights and
tokens, once through recallbench's CPU path and once through the library's Triton kernels
under ``TRITON_INTERPRET=1``, and prints the largest relative gap of the logits and of the
gradients, the latter in two measures (see :func:`gaps`).  Each adapter runs in a fresh
interpreter (``TRITON_INTERPRET`` must be set before triton is imported), killed after
``--time-limit`` seconds.

``--dot`` sets ``TRITON_F32_DEFAULT``, which decides how ``tl.dot`` treats float32 inputs:
``ieee`` (float32 products everywhere), ``default`` (unset: Triton's default on NVIDIA GPUs,
TF32 unless a kernel asks for IEEE, e.g. ``allow_tf32=False``) or ``tf32`` (TF32 everywhere,
overriding the kernels).  The interpreter itself computes every dot in float32, so here a
TF32 dot rounds its float32 inputs to TF32 (10 mantissa bits, round to nearest even) first.
Several values run in one process, the CPU reference once.  tests/test_kernel_parity.py
asserts the gaps; benchmarks/cuda_vs_cpu.py uses the same measures on a GPU.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

FLA = "flash-linear-attention"
TRITON_ADAPTERS = ("based", "deltanet", "gated-deltanet", "gla", "gsa", "hgrn2", "linear-attention",
                   "retnet", "rwkv6", "simple-gla", "mamba2")
DOTS = ("ieee", "default", "tf32")  # --dot: TRITON_F32_DEFAULT=ieee, unset, tf32
MEANINGFUL = 1e-2  # a parameter's own gap is asserted if its gradient is >= this x the overall scale


# -- measuring (shared with benchmarks/cuda_vs_cpu.py) ----------------------------------------
def build(name: str, device: str, d_model: int, d_state: int, seq_len: int | None = None,
          options: dict | None = None):
    """(config, RecallModel) of adapter ``name`` with weights from seed 0, on ``device``."""
    import torch

    from recallbench.api.config import resolve
    from recallbench.api.registry import ADAPTERS
    from recallbench.harness.model import RecallModel

    raw = {"model": {"adapter": name, "d_model": d_model, "d_state": d_state, "options": options or {}}}
    if seq_len is not None:  # MQAR needs L >= 4 · num_facts
        raw["task"] = {"seq_len": seq_len, "num_facts": max(1, min(16, seq_len // 4))}
    cfg = resolve(raw)
    torch.manual_seed(0)
    adapter = ADAPTERS.get(name)(cfg.model)
    return cfg, RecallModel(adapter, cfg.task.vocab_size, device=device).to(device)


def fwd_bwd(model, x, y):
    """Logits and every parameter's gradient (float32, on the CPU) of one training step's loss."""
    from recallbench.harness.loop import masked_loss

    model.zero_grad(set_to_none=True)
    logits = model(x)
    loss = masked_loss(logits, y)
    if loss.requires_grad:
        loss.backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters()
             if p.grad is not None}
    return logits.detach().float().cpu(), grads


def _amax(t) -> float:
    return float(t.abs().max()) if t.numel() else 0.0


def rel(a, b) -> float:
    """max |a − b| / max |b|."""
    return _amax(a - b) / max(_amax(b), 1e-30)


def gaps(ref_logits, ref_grads, logits, grads) -> dict:
    """The gaps of (logits, grads) from the reference (ref_logits, ref_grads).

    A parameter's gradient gap is measured twice: against its own gradient (max|g − r| /
    max|r|, which is large for a gradient that is tiny because its terms nearly cancel,
    e.g. mamba2's ``dt_bias``), and against the model's overall gradient scale (max|g − r| /
    the largest |r| over all parameters).  ``params`` gives both and the parameter's scale
    relative to the overall one; ``worst_param_own`` / ``worst_param_overall`` name the
    parameter with the largest gap in each measure.
    """
    scale = max((_amax(g) for g in ref_grads.values()), default=0.0) or 1e-30
    params = {}
    for n, r in ref_grads.items():
        diff = _amax(grads[n] - r) if n in grads else float("inf")
        params[n] = {"own": diff / max(_amax(r), 1e-30), "overall": diff / scale, "scale": _amax(r) / scale}
    own = max(params, key=lambda n: params[n]["own"], default=None)
    overall = max(params, key=lambda n: params[n]["overall"], default=None)
    return {"logits_rel_diff": rel(logits, ref_logits),
            "grad_rel_diff": params[own]["own"] if own else 0.0,
            "grad_rel_diff_overall": params[overall]["overall"] if overall else 0.0,
            "worst_param_own": own, "worst_param_overall": overall, "params": params}


def precision_settings() -> dict:
    """What decides float32 matmul precision in this process (recorded with every result)."""
    import torch

    return {"torch_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "TRITON_F32_DEFAULT": os.environ.get("TRITON_F32_DEFAULT"),
            "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET")}


# -- Triton's interpreter, made to run the libraries' kernels ---------------------------------
def _loop_var_as_tensor(self, node):
    """Compiled Triton makes a ``range`` loop's variable a tensor (fla calls ``i_t.to(...)`` on
    it); the interpreter leaves it an int.  Rebind it as a tensor at the top of the body."""
    node = self.generic_visit(node)
    func = node.iter.func if isinstance(node.iter, ast.Call) else None
    called = getattr(func, "id", None) or getattr(func, "attr", None)
    if called == "range" and isinstance(node.target, ast.Name):
        name = node.target.id
        rebind = self.visit_Assign(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())],
                                              value=ast.Name(id=name, ctx=ast.Load())))
        node.body.insert(0, ast.fix_missing_locations(ast.copy_location(rebind, node)))
    return node


def patch_interpreter() -> None:
    """Let the interpreter run fla's and mamba-ssm's kernels as a GPU would (needs TRITON_INTERPRET=1).

    * autotuning: the first config only (the interpreter has no benchmarker; configs
      change the summation order, not the maths);
    * loop variables of ``range`` loops are tensors, as when compiled;
    * ``tl.dot`` with TF32 precision rounds its float32 inputs to TF32 (the interpreter
      computes every dot in float32 whatever the precision);
    * for a CPU tensor, ``torch.cuda.device(None)`` is a no-op and
      ``torch.cuda.get_device_properties`` says 132 SMs, an H200's (mamba-ssm's launchers
      enter the one and size their grids by the other).
    """
    import numpy as np
    import torch
    import triton.language as tl
    from triton._C.libtriton import ir
    from triton.runtime import autotuner, interpreter

    first = autotuner.Autotuner.prune_configs
    autotuner.Autotuner.prune_configs = lambda self, kwargs: first(self, kwargs)[:1]
    interpreter.ASTTransformer.visit_For = _loop_var_as_tensor
    create_dot = interpreter.InterpreterBuilder.create_dot

    def dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if input_precision == ir.INPUT_PRECISION.TF32 and a.dtype == tl.float32 and b.dtype == tl.float32:
            a = interpreter.TensorHandle(interpreter._round_f32_to_tf32(a.data), a.dtype)
            b = interpreter.TensorHandle(interpreter._round_f32_to_tf32(b.data), b.dtype)
            return interpreter.TensorHandle(np.matmul(a.data, b.data, dtype=d.data.dtype) + d.data,
                                            d.dtype.scalar)
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    interpreter.InterpreterBuilder.create_dot = dot
    cuda_device, properties = torch.cuda.device, torch.cuda.get_device_properties
    torch.cuda.device = lambda index: contextlib.nullcontext() if index is None else cuda_device(index)
    torch.cuda.get_device_properties = lambda device=None: (
        SimpleNamespace(multi_processor_count=132)
        if isinstance(device, (str, torch.device)) and torch.device(device).type == "cpu" else properties(device))


@contextlib.contextmanager
def fla_kernels() -> Iterator[None]:
    """fla's own functions for CPU tensors too: the CPU swaps taken out for the block."""
    from recallbench.adapters.cpu.fla_swaps import SWAPS

    while SWAPS.installed():
        SWAPS.uninstall()
    try:
        yield
    finally:
        SWAPS.keep_installed()


@contextlib.contextmanager
def mamba2_kernels(model) -> Iterator[None]:
    """mamba-ssm's Triton SSD scan and gated RMSNorm for CPU tensors: Mamba2's unfused path
    (``use_mem_eff_path=False``; the fused one needs the causal-conv1d CUDA extension), the
    conv as ``nn.Conv1d``, and every other CPU swap kept."""
    import mamba_ssm

    from recallbench.adapters import mamba as blocks
    from recallbench.adapters.kernel_swap import SwapSet

    triton = {"mamba_ssm.modules.mamba2:mamba_chunk_scan_combined",
              "mamba_ssm.ops.triton.layernorm_gated:rmsnorm_fn"}
    layers = [m for m in model.modules() if isinstance(m, mamba_ssm.Mamba2)]
    if not layers:
        raise NotImplementedError("only mamba_ssm.Mamba2 layers (head patterns mva, mha) run Triton on "
                                  "a CPU; mqa/mka's scan picks its kernel by x.is_cuda")
    swaps, kept = blocks.SWAPS, [s for s in blocks.SWAPS if s.target not in triton]
    blocks.SWAPS = SwapSet(swaps.name + " (Triton scan)", tuple(kept), dispatch=False,
                           before_install=swaps.before_install)
    fused = [layer.use_mem_eff_path for layer in layers]
    for layer in layers:
        layer.use_mem_eff_path = False
    try:
        yield
    finally:
        blocks.SWAPS = swaps
        for layer, was in zip(layers, fused):
            layer.use_mem_eff_path = was


def library_kernels(name: str, model) -> contextlib.AbstractContextManager:
    """The context in which ``model`` (built on CPU) runs its library's Triton kernels."""
    from recallbench.api.registry import ADAPTERS

    if name == "mamba2":
        return mamba2_kernels(model)
    if getattr(ADAPTERS.get(name), "distribution", None) == FLA:
        return fla_kernels()
    raise NotImplementedError(f"{name}: its library kernels are not Triton")


def set_f32_default(dot: str) -> None:
    """``TRITON_F32_DEFAULT`` for ``--dot`` (Triton reads it at each ``tl.dot`` it traces)."""
    if dot == "default":
        os.environ.pop("TRITON_F32_DEFAULT", None)
    else:
        os.environ["TRITON_F32_DEFAULT"] = dot


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1][:240] if text else ''}"


def measure(name: str, dots: list[str], args) -> Iterator[dict]:
    """One row per dot precision: the Triton path (interpreted) against the CPU path.

    A Triton path that does not run here gives a row with ``skipped`` (the reason, one line).
    """
    import torch

    chunks = {"chunk_size": args.ssd_chunk} if name == "mamba2" and args.ssd_chunk else {}
    cfg, model = build(name, "cpu", args.d_model, args.d_state, args.seq_len, chunks)
    x, y = cfg.task.sample(args.batch, torch.Generator().manual_seed(0))
    ref = fwd_bwd(model, x, y)
    for dot in dots:
        set_f32_default(dot)
        row = {"adapter": name, "dot": dot}
        start = time.perf_counter()
        try:
            with library_kernels(name, model):
                out = fwd_bwd(model, x, y)
        except Exception as exc:  # the kernels cannot run under the interpreter
            yield {**row, "skipped": f"Triton under the interpreter: {_one_line(exc)}"}
            continue
        yield {**row, **gaps(*ref, *out), "seconds": round(time.perf_counter() - start, 2),
               **precision_settings()}


def worker(names: list[str], dots: list[str], args) -> None:
    """Print one JSON line per (adapter, dot), flushed as each is done."""
    import torch

    torch.set_num_threads(1)
    patch_interpreter()
    for name in names:
        try:
            for row in measure(name, dots, args):
                print(json.dumps(row), flush=True)
        except Exception as exc:  # the CPU path itself failed: report, go on with the next
            for dot in dots:
                print(json.dumps({"adapter": name, "dot": dot, "error": _one_line(exc)}), flush=True)


# -- driver: fresh interpreters with TRITON_INTERPRET=1 --------------------------------------
def json_lines(cmd: list[str], env: dict, timeout: float) -> tuple[list[dict], str]:
    """Run ``cmd`` (from the project root), killed after ``timeout`` seconds: the JSON rows it
    printed (also those before a time-out) and, for rows it did not print, why."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=Path(__file__).resolve().parent.parent)
        out, why = proc.stdout, f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:240]}"
    except subprocess.TimeoutExpired as exc:
        out, why = exc.stdout or "", f"timed out after {timeout:g} s"
        out = out.decode() if isinstance(out, bytes) else out
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")], why


def interpreter_env(dot: str) -> dict:
    """This process's environment with TRITON_INTERPRET=1 and TRITON_F32_DEFAULT for ``dot``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_F32_DEFAULT"}
    return {**env, "TRITON_INTERPRET": "1", **({} if dot == "default" else {"TRITON_F32_DEFAULT": dot})}


def run_worker(names: list[str], dots: list[str], args, timeout: float) -> list[dict]:
    """:func:`worker` in a fresh interpreter, killed after ``timeout`` seconds; the rows it
    finished are kept, each unfinished (adapter, dot) gets an ``error`` row."""
    cmd = [sys.executable, __file__, "--worker", *names, "--dot", *dots, "--batch", str(args.batch),
           "--seq-len", str(args.seq_len), "--d-model", str(args.d_model), "--d-state", str(args.d_state),
           *(["--ssd-chunk", str(args.ssd_chunk)] if getattr(args, "ssd_chunk", None) else [])]
    rows, why = json_lines(cmd, interpreter_env(dots[0]), timeout)
    done = {(r["adapter"], r["dot"]) for r in rows}
    return rows + [{"adapter": n, "dot": d, "error": why} for n in names for d in dots if (n, d) not in done]


def show(row: dict) -> str:
    if "error" in row or "skipped" in row:
        return f"{row['adapter']:<17} {row['dot']:<5} {row.get('error') or 'skipped: ' + row['skipped']}"
    return (f"{row['adapter']:<17} {row['dot']:<5} logits {row['logits_rel_diff']:.1e}  "
            f"grads overall {row['grad_rel_diff_overall']:.1e} ({row['worst_param_overall']})  "
            f"own {row['grad_rel_diff']:.1e} ({row['worst_param_own']})  {row['seconds']:.1f} s")


class Parser(argparse.ArgumentParser):
    """argparse, with a bad flag told in one line (no usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message}\n")


def parse(argv=None):
    ap = Parser(prog=os.path.basename(__file__), description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=TRITON_ADAPTERS, metavar="NAME",
                    help=f"adapters (default: all of {', '.join(TRITON_ADAPTERS)})")
    ap.add_argument("--dot", nargs="+", choices=DOTS, default=["ieee"])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--d-state", type=int, default=16)
    ap.add_argument("--ssd-chunk", type=int, help="mamba2's options.chunk_size (default: its own, 256)")
    ap.add_argument("--time-limit", type=float, default=600.0, help="seconds per adapter")
    ap.add_argument("--worker", nargs="+", choices=TRITON_ADAPTERS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for flag in ("batch", "seq_len", "d_model", "d_state", "time_limit", "ssd_chunk"):
        if getattr(args, flag) is not None and getattr(args, flag) <= 0:
            ap.error(f"--{flag.replace('_', '-')} must be > 0")
    if args.seq_len < 4:
        ap.error("--seq-len must be >= 4 (MQAR needs L >= 4 · num_facts)")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker:  # inside the fresh interpreter
        if os.environ.get("TRITON_INTERPRET") != "1":
            print("--worker needs TRITON_INTERPRET=1 set before Python starts", file=sys.stderr)
            return 2
        worker(args.worker, args.dot, args)
        return 0
    for name in args.only or TRITON_ADAPTERS:
        for row in run_worker([name], args.dot, args, args.time_limit):
            print(show(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
