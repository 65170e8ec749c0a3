"""Every GPU estimate in the docs, measured in one run on a GPU machine within a wall budget.

    python benchmarks/gpu_run.py --out DIR                                # on the GPU machine
    python benchmarks/gpu_run.py --device cpu --quick --out /tmp/x       # dry run, about 3 min
    python benchmarks/gpu_run.py --out DIR [--only STEP ...] [--budget-s 480]

Six steps, each in subprocesses under its own time limit: its share of ``--budget-s``
(default 480 s, 8 minutes; the shares are printed up front), plus what earlier steps left
unused, so that the whole run ends within the budget.  Each subprocess leads its own
process group, killed with it on a time-out or Ctrl-C.  A step that fails or runs past its
limit is recorded with why, and the next one starts.

480 s is not enough on a fresh machine.  On an H200 (``docs/results/gpu/``) every process
took about 20 s to start, and each fla or mamba-ssm adapter's first process was still
compiling and autotuning its Triton kernels when its limit came (45 to 76 s, 8 at once);
Triton and fla cache both, so later processes on the same machine skip it.  So plan two
calls on one machine: ``--budget-s 560 --only doctor parity-ieee
parity-default table8``, then ``--only throughput leaderboard`` with what is left.

* ``doctor``: ``recallbench doctor``'s text; adapters not on ``fused``/``own`` kernels on
  the GPU are named before the later steps start.
* ``parity-ieee``, ``parity-default``: ``benchmarks/cuda_vs_cpu.py``, every adapter, with
  ``--triton-f32 ieee`` and with Triton's default (TF32 dots), ``--jobs`` adapters at once
  (their gaps do not depend on it); each adapter killed after twice its equal part of the
  step (``parity-ieee.jsonl``, ``parity-default.jsonl``).
* ``table8``: ``recallbench run`` of the Table-8 default per adapter with ``--set
  model.adapter=NAME train.early_stop=0.99``: steps, ``train_s`` (the time to validation
  accuracy 0.99 where reached, else the accuracy at the cap), kernel path.  linear-mamba
  and mamba2 run alone, one after the other (the per-step times the docs quote); the
  others ``--jobs`` at a time, sharing the device (each row's ``concurrent`` says with how
  many).  Each run gets the step's time left over the rounds left (``table8.jsonl``,
  records in ``table8/``).
* ``throughput``: ``benchmarks/gpu_throughput.py`` on its middle cell, 32x16, with 1, 4, 16
  workers and ensembles of K = 8, 32, 64 (``throughput.jsonl``).  It trains linear-mamba
  only; mamba2 is recorded as not supported (its blocks do not vmap).
* ``leaderboard``: ``recallbench leaderboard run --suite leaderboards/gpu-standard --adapter
  linear-mamba`` with 4 workers: ``--dry-run`` (points, ETA), then one chunk under
  ``--time-budget`` into ``store/``; the calls of 480 s an adapter needs, from both.

The adapters: every one the registry (``recallbench.api.registry``) lists as available.
``--quick`` shrinks each step: linear-mamba and mamba2 only, tiny models, 2 training steps,
gpu_throughput's ``--quick``, a tiny CPU copy of the gpu-standard suite.  ``--out DIR``
(created; refused unless new or empty) gets ``steps.jsonl`` (a line per step: status,
seconds, why, what it measured), the files above, ``logs/`` (each subprocess's stdout and
stderr) and ``summary.json`` (device, versions, TF32 settings, budget, each step's status
and seconds).  A GPU run's DIR is committed under ``docs/results/gpu/``.  Exit status: 0
every step ok, 1 not, 2 bad input or no CUDA, 130 interrupted.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpu_calls import ROOT, Ctx, append_jsonl, read_jsonl, say  # benchmarks/
from kernel_parity import Parser  # benchmarks/: argparse, a bad flag in one line, exit 2

BENCH = ROOT / "benchmarks"
PROG = os.path.basename(__file__)
PY = [sys.executable]
#: each step's share of the budget (renormalised over the steps --only picks)
SHARES = {"doctor": 0.04, "parity-ieee": 0.13, "parity-default": 0.10, "table8": 0.35,
          "throughput": 0.22, "leaderboard": 0.16}
QUICK_ADAPTERS = ("linear-mamba", "mamba2")
QUICK_PARITY = ["--batch", "2", "--d-model", "16", "--d-state", "4", "--seq-len", "16",
                "--reps", "1"]
QUICK_TABLE8 = (" model.d_model=16 model.d_state=4 train.max_steps=2 train.val_every=1"
                " train.val_size=16 train.test_size=16 train.batch_size=8")
THROUGHPUT = ["--cells", "32x16", "--workers", "1", "4", "16", "--ensembles", "8", "32", "64"]
THROUGHPUT_QUICK = ["--quick", "--workers", "1", "--ensembles", "2"]
MAMBA2_WHY = ("not supported by gpu_throughput.py: its cells are the D-N study's linear-mamba "
              "runs, and mamba2's blocks do not vmap, so it cannot train as a batched ensemble")
CALL_S = 480  # one leaderboard call's --time-budget, as the suite documents


def kernel_notes(text: str, device: str) -> dict[str, str]:
    """From doctor's text: adapter -> why it is unavailable or, on a GPU, not fused/own."""
    notes, name = {}, None
    for line in text.splitlines():
        if m := re.match(r"  (\S+)  (available|unavailable: (.*))", line):
            name = m[1]
            if m[3]:
                notes[name] = f"unavailable: {m[3]}"
        elif name and device != "cpu" and (m := re.match(r"    (\S+)\s+(\S+)\s+(.*)", line)):
            if m[1].startswith("cuda") and m[2] not in ("fused", "own"):
                notes[name] = f"{m[1]} {m[2]}: {m[3]}"
    return notes


def step_doctor(c: Ctx, limit: float) -> dict:
    r = c.call("doctor", PY + ["-m", "recallbench.cli.main", "doctor"], limit)
    text = c.stdout("doctor")
    c.notes = kernel_notes(text, c.device)
    return {"commands": [r], "text": text, "not_fused": c.notes}


def say_notes(c: Ctx, step: str) -> None:
    for name in c.adapters:
        if name in c.notes:
            say(f"  {step}: {name} will not run fused here: {c.notes[name][:200]}")


def step_parity(c: Ctx, limit: float, dot: str) -> dict:
    say_notes(c, f"parity-{dot}")
    path = c.out / f"parity-{dot}.jsonl"
    jobs = min(c.args.jobs, max(len(c.adapters), 1))
    per = max(10.0, min(limit - 10, 2 * jobs * (limit - 15) / max(len(c.adapters), 1)))
    # twice an equal part: the slow ones (Triton compiling) get longer; the step's limit
    # still bounds them all
    say(f"  parity-{dot}: {len(c.adapters)} adapters, {jobs} at once, each killed after {per:.0f} s")
    cmd = PY + [str(BENCH / "cuda_vs_cpu.py"), "--device", c.device, "--triton-f32", dot,
                "--out", str(path), "--time-limit", f"{per:.0f}", "--jobs", str(jobs),
                *(QUICK_PARITY if c.quick else []), "--only", *c.adapters]
    r = c.call(f"parity-{dot}", cmd, limit)
    rows = read_jsonl(path)
    errors = {row["adapter"]: row["error"] for row in rows if "error" in row}
    if errors and r["status"] == "ok":  # an adapter killed or failing: the step says so
        name, err = next(iter(errors.items()))
        r.update(status="timeout" if err.startswith("timed out") else "failed",
                 why=f"{len(errors)} of {len(rows)} adapters, e.g. {name}: {err}")
    missing = [n for n in c.adapters if n not in {row["adapter"] for row in rows}]
    if missing and r["why"]:
        r["why"] += f"; no row for {', '.join(missing)}"
    return {"commands": [r], "file": path.name, "rows": len(rows), "per_adapter_s": round(per),
            "jobs": jobs,
            "row_errors": errors, "not_reached": missing}


def table8_row(name: str, r: dict, path: Path) -> dict:
    row = {"adapter": name, "status": r["status"], "why": r["why"], "process_s": r["seconds"]}
    try:  # a record written just before the limit counts: the run was measured
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return row
    if rec.get("status") != "ok":
        return {**row, "status": "failed", "why": rec.get("error")}
    to99 = (rec.get("steps_to") or {}).get("0.99")
    return {**row, "status": "ok", "why": None, "steps": rec["steps"],
            "max_steps": rec["config"]["train"]["max_steps"], "train_s": rec["train_s"],
            "wall_s": rec.get("wall_s"), "accuracy": rec["accuracy"],
            "val_accuracy": rec["val_accuracy"], "steps_to_0.99": to99,
            "time_to_0.99_s": rec["train_s"] if to99 is not None else None,
            "stop_reason": rec["stop_reason"], "converged": rec["converged"],
            "kernels": rec.get("kernels"), "device": rec.get("device")}


def step_table8(c: Ctx, limit: float) -> dict:
    say_notes(c, "table8")
    deadline = time.monotonic() + limit
    sets = f"train.early_stop=0.99 train.device={c.device}" + (QUICK_TABLE8 if c.quick else "")
    (c.out / "table8").mkdir(exist_ok=True)
    alone = QUICK_ADAPTERS[:1] if c.quick else QUICK_ADAPTERS  # a dry run tries both ways
    solo = [n for n in c.adapters if n in alone]
    rest = [n for n in c.adapters if n not in alone]
    jobs = max(1, min(c.args.jobs, len(rest)))
    lock, waves = threading.Lock(), math.ceil(len(rest) / jobs)

    def one(name: str, rounds: int, together: int) -> tuple[dict, dict]:
        per = (deadline - time.monotonic()) / rounds  # the time left over the rounds left
        rec = c.out / "table8" / f"{name}.json"
        cmd = PY + ["-m", "recallbench.cli.main", "run", "--quiet", "--out", str(rec),
                    "--set", f"model.adapter={name} {sets}"]
        r = c.call(f"table8-{name}", cmd, per)
        row = {**table8_row(name, r, rec), "concurrent": together}
        r.update(status=row["status"], why=row["why"])
        with lock:
            append_jsonl(c.out / "table8.jsonl", row)
        got = (f"{row['steps']} steps, train {row['train_s']:.1f} s, accuracy "
               f"{row['accuracy']:.4f}, {(row['kernels'] or {}).get('path')} kernels"
               if "steps" in row else f"{row['status']}: {row['why']}")
        say(f"  table8 {name}{f' ({together} at once)' if together > 1 else ''}: {got}")
        return r, row

    done = [one(name, len(solo) - i + waves, 1) for i, name in enumerate(solo)]
    if rest:
        say(f"  table8: {len(rest)} more adapters, {jobs} at once")
        with ThreadPoolExecutor(jobs) as pool:  # run i is in round i // jobs of the waves
            done += list(pool.map(lambda i: one(rest[i], waves - i // jobs, jobs), range(len(rest))))
    reached = sum(row.get("steps_to_0.99") is not None for _, row in done)
    return {"commands": [r for r, _ in done], "file": "table8.jsonl", "rows": len(done),
            "reached_0.99": reached, "jobs": jobs}


def step_throughput(c: Ctx, limit: float) -> dict:
    say(f"  throughput: mamba2 {MAMBA2_WHY}")
    path = c.out / "throughput.jsonl"
    cmd = PY + [str(BENCH / "gpu_throughput.py"), "--device", c.device, "--out", str(path),
                *(THROUGHPUT_QUICK if c.quick else THROUGHPUT)]
    r = c.call("throughput", cmd, limit)
    rows = read_jsonl(path)
    if r["status"] == "ok" and (bad := [x for x in rows if x["failed"]]):
        r.update(status="failed", why=f"{bad[0]['failed']} runs failed in {bad[0]['mode']} "
                                      f"{bad[0]['n']} (and {len(bad) - 1} more rows)")
    return {"commands": [r], "file": path.name, "adapter": "linear-mamba", "rows": len(rows),
            "ratios": {f"{x['cell']} {x['mode']} {x['n']}": x["ratio"] for x in rows},
            "not_run": {"mamba2": MAMBA2_WHY}}


def quick_suite(out: Path) -> Path:
    """A tiny CPU copy of the gpu-standard suite (the folder must carry its name)."""
    import yaml

    data = yaml.safe_load((ROOT / "leaderboards" / "gpu-standard" / "suite.yaml").read_text())
    data.update(device="cpu", threads=1, num_facts=[8], seeds=[0],
                task={**data["task"], "vocab_size": 64, "seq_len": 32},
                budgets=[{"name": "D8-N4", "model": {"d_model": 8, "d_state": 4, "n_layers": 1}}])
    data["train"].update(lr=[0.01], max_steps=2, val_every=1, val_size=16, test_size=16,
                         batch_size=8, patience=None)
    folder = out / "quick-suite" / "gpu-standard"
    folder.mkdir(parents=True)
    (folder / "suite.yaml").write_text(json.dumps(data, indent=1))  # JSON is YAML
    return folder


def stored_points(store: Path) -> int:
    from recallbench.runs.store import Store

    if not store.is_dir():
        return 0
    records = Store(store).read(warn=lambda _: None).by_hash.values()
    return sum(r.get("status") == "ok" for r in records)


def step_leaderboard(c: Ctx, limit: float) -> dict:
    deadline = time.monotonic() + limit
    suite = quick_suite(c.out) if c.quick else ROOT / "leaderboards" / "gpu-standard"
    store = c.out / "store"
    base = PY + ["-m", "recallbench.cli.main", "leaderboard", "run", "--suite", str(suite),
                 "--adapter", "linear-mamba", "--store", str(store),
                 *([] if c.quick else ["--executor", "processes", "--workers", "4"])]
    dry = c.call("leaderboard-dry-run", base + ["--dry-run"], 0.5 * limit)
    plan = c.stdout("leaderboard-dry-run")
    m = re.search(r": (\d+) points", plan)
    points = int(m[1]) if m else None
    e = re.search(r"ETA: ([\d.]+) min to ([\d.]+) min on (\d+) worker", plan)
    eta = [float(e[1]), float(e[2])] if e else None
    left = deadline - time.monotonic()
    chunk = c.call("leaderboard-chunk", base + ["--time-budget", str(max(1, int(left - 20)))], left)
    done = re.search(r"^done: .*", c.stdout("leaderboard-chunk"), re.M)
    ran = stored_points(store)
    calls_eta = [max(1, math.ceil(x * 60 / CALL_S)) for x in eta] if eta else None
    calls_chunk = (math.ceil(points * chunk["seconds"] / ran / CALL_S) if ran and points else None)
    say(f"  leaderboard: {points} points; dry-run ETA {eta} min: {calls_eta} calls of {CALL_S} s; "
        f"the chunk stored {ran} in {chunk['seconds']:.0f} s: about {calls_chunk} calls")
    where = suite.relative_to(c.out if c.quick else ROOT)
    return {"commands": [dry, chunk], "suite": str(where),
            "points": points, "eta_min": eta, "workers": int(e[3]) if e else None,
            "chunk_points": ran, "chunk_s": chunk["seconds"], "done": done[0] if done else None,
            "calls_of_480s": {"from_eta": calls_eta, "from_chunk": calls_chunk}}


STEP_FNS = {"doctor": step_doctor, "parity-ieee": lambda c, t: step_parity(c, t, "ieee"),
            "parity-default": lambda c, t: step_parity(c, t, "default"), "table8": step_table8,
            "throughput": step_throughput, "leaderboard": step_leaderboard}


def environment(c: Ctx) -> dict:
    import torch

    from recallbench.api.kernels import triton_version

    cuda = c.device != "cpu"
    return {"device": torch.cuda.get_device_name(0) if cuda else f"cpu ({os.cpu_count()} cores)",
            "device_kind": c.device, "quick": c.quick, "budget_s": c.args.budget_s,
            "jobs": c.args.jobs, "cpus": os.cpu_count(),
            "python": sys.version.split()[0], "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "triton": triton_version(),
            "tf32": {"torch.backends.cuda.matmul.allow_tf32":
                     bool(torch.backends.cuda.matmul.allow_tf32),
                     "torch.backends.cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                     "float32_matmul_precision": torch.get_float32_matmul_precision(),
                     "TRITON_F32_DEFAULT": os.environ.get("TRITON_F32_DEFAULT")},
            "adapters": c.adapters}


def run_steps(c: Ctx, steps: list[str], env: dict) -> list[dict]:
    """Each step under its share of the time left; a line in steps.jsonl and summary.json
    after each (a run stopped midway leaves both)."""
    done = []
    for i, name in enumerate(steps):
        limit = c.left() * SHARES[name] / sum(SHARES[s] for s in steps[i:])
        say(f"[{i + 1}/{len(steps)}] {name}: limit {limit:.0f} s "
            f"(used {c.args.budget_s - c.left():.0f} s, {c.left():.0f} s left)")
        t0 = time.monotonic()
        try:
            extra = STEP_FNS[name](c, limit)
        except KeyboardInterrupt:
            extra = {"commands": [{"label": name, "status": "interrupted",
                                   "why": "Ctrl-C or SIGTERM"}]}
        bad = [r for r in extra["commands"] if r["status"] != "ok"]
        why = (f"{bad[0]['label']}: {bad[0]['why']}"
               + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "") if bad else None)
        row = {"step": name, "status": bad[0]["status"] if bad else "ok", "why": why,
               "seconds": round(time.monotonic() - t0, 1), "limit_s": round(limit, 1), **extra}
        done.append(row)
        append_jsonl(c.out / "steps.jsonl", row)
        brief = [{k: r[k] for k in ("step", "status", "why", "seconds", "limit_s")} for r in done]
        summary = {**env, "seconds": round(c.args.budget_s - c.left(), 1), "steps": brief}
        (c.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        say(f"[{i + 1}/{len(steps)}] {name}: {row['status']} in {row['seconds']:.0f} s; used "
            f"{c.args.budget_s - c.left():.0f} s, at most {max(c.left(), 0):.0f} s to go")
        if row["status"] == "interrupted":
            break
    return done


def parse(argv):
    ap = Parser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="a new or empty folder for the results")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda (default) or cpu (a dry run)")
    ap.add_argument("--quick", action="store_true", help="tiny settings in every step (a dry run)")
    ap.add_argument("--only", nargs="+", choices=list(SHARES), metavar="STEP",
                    help=f"run these steps only, of: {', '.join(SHARES)}")
    ap.add_argument("--budget-s", type=float, default=480.0, help="wall seconds in all (480)")
    ap.add_argument("--jobs", type=int, help="adapters at once in the parity steps and in "
                    "table8 after linear-mamba and mamba2 (default: the CPUs, at most 16, on "
                    "cuda; 2 on cpu)")
    args = ap.parse_args(argv)
    if not args.budget_s > 0:
        ap.error(f"--budget-s {args.budget_s:g}: must be > 0")
    if args.jobs is None:
        # each adapter's process compiles its Triton kernels on one CPU (minutes, cold)
        args.jobs = min(16, os.cpu_count() or 1) if args.device == "cuda" else 2
    if not 1 <= args.jobs <= 32:
        ap.error(f"--jobs {args.jobs}: must be 1 to 32")
    return args


def cuda_missing() -> str | None:
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
    return None


def main(argv=None) -> int:
    start = time.monotonic()
    args = parse(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is not a folder" if not out.is_dir() else "exists and is not empty"
        print(f"{PROG}: --out {args.out} {what}: give a new or empty folder", file=sys.stderr)
        return 2
    if args.device != "cpu" and (why := cuda_missing()):
        print(f"{PROG}: CUDA is not available here ({why}): run on a GPU machine, or "
              "--device cpu --quick for a dry run", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM unwinds like Ctrl-C
    (out / "logs").mkdir(parents=True, exist_ok=True)
    from recallbench.api.registry import ADAPTERS

    adapters = []
    for name, _origin, ok, why in ADAPTERS.describe():
        if args.quick and name not in QUICK_ADAPTERS:
            continue
        if ok:
            adapters.append(name)
        else:
            say(f"{name}: unavailable, left out of every step: {why}")
    c = Ctx(args, adapters, start)
    steps = [s for s in SHARES if not args.only or s in args.only]
    env = environment(c)
    total = sum(SHARES[s] for s in steps)
    say(f"{env['device']}, torch {env['torch']}, budget {args.budget_s:.0f} s: " + ", ".join(
        f"{s} {args.budget_s * SHARES[s] / total:.0f} s" for s in steps)
        + f" (more where earlier steps finish early); {len(adapters)} adapters; output in {out}")
    done = run_steps(c, steps, env)
    for row in done:
        print(f"{row['step']:<15} {row['status']:<11} {row['seconds']:6.0f} s"
              + (f"  {row['why']}" if row["why"] else ""))
    if any(r["status"] == "interrupted" for r in done):
        return 130
    return 0 if all(r["status"] == "ok" for r in done) else 1


if __name__ == "__main__":
    raise SystemExit(main())
