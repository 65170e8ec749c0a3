"""A capacity card on one GPU, measured in one call within a wall budget: where a tiny
model's step goes, a card cell's runs packed against one at a time, linear-mamba's D32-N8
card packed, and every adapter's CUDA path against its CPU path.

    source .gpu/install-staged.sh && python3 benchmarks/gpu_card.py --out "$OUT"   # a GPU
    python benchmarks/gpu_card.py --device cpu --quick --out DIR                   # dry run

Four steps, each in its own process group under a share of ``--budget-s`` (default 510 s,
at most 540: a device call's 9 minutes) plus what earlier steps left; a step past its limit
is killed, recorded with why, and the next one starts:

* ``shares`` (8%): ``step_shares.py``: Lightning against a plain loop, the phases, kernel
  launches a step and the device's busy time, the validations' share (``shares.txt``);
* ``packing`` (27%): ``bench_packing.py`` on the card's first cell (linear-mamba D=32
  N=8, V=512, the card protocol's lr list at 200 steps, limit 400): 32 seeds packed in one
  batch against the first 2 one at a time (``packing.jsonl``; goal >= 20x);
* ``card`` (33%): the D32-N8 card (method 2, seeds 0,1) with its runs packed
  (``runs.packing.run_card``) under the step's limit: its wall time (goal <= 2 minutes),
  whether it finished, the card and store (``card/``);
* ``parity`` (the rest): ``cuda_vs_cpu.py --triton-f32 ieee`` on every adapter, 16 at once
  (``parity.jsonl``: a row each, or why not).

``--out DIR`` (created; refused unless new or empty) gets those files, ``logs/`` and
``summary.json`` (device, versions, each step's status and seconds, and the three numbers:
``packed_ratio``, ``card_wall_s`` with ``card_finished``, ``parity_rows``).  ``--quick``
shrinks every step (tiny model and protocol, 4 runs, two non-Triton adapters); with
``--device cpu`` it checks the flow on any machine in about a minute.  Exit status: 0 every
step ok, 1 not, 2 bad input or no CUDA.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_calls import ROOT, Ctx, read_jsonl, say  # noqa: E402  benchmarks/
from kernel_parity import Parser  # noqa: E402  benchmarks/: a bad flag in one line

BENCH = ROOT / "benchmarks"
PY = [sys.executable]
SHARES = {"shares": 0.08, "packing": 0.27, "card": 0.33, "parity": 0.32}
MAX_BUDGET_S = 540
CELL = ["--adapter", "linear-mamba", "--d-model", "32", "--d-state", "8", "--vocab", "512"]
QUICK_CELL = ["--d-model", "8", "--d-state", "4", "--vocab", "64", "--facts", "4",
              "--steps", "20", "--limit", "40", "--runs", "4", "--batch", "4",
              "--one-runs", "1", "--eval-size", "32"]
QUICK_TRAIN = {"max_steps": 20, "max_steps_limit": 40, "val_every": 10, "val_size": 32,
               "test_size": 32, "batch_size": 16}
QUICK_PARITY = ["--batch", "2", "--d-model", "16", "--d-state", "4", "--seq-len", "16",
                "--reps", "1", "--only", "linear-mamba", "attention"]


def card_base(device: str, quick: bool, d: int, n: int, vocab: int) -> dict:
    """The card's config as ``recallbench capacity`` makes it (the protocol, MQAR at V)."""
    from recallbench.api.config import resolve
    from recallbench.runs.capacity import TRAIN

    train = {**TRAIN, **(QUICK_TRAIN if quick else {}), "device": device, "progress": False}
    return resolve({"task": {"name": "mqar", "vocab_size": vocab, "num_facts": 2, "seq_len": 8},
                    "model": {"adapter": "linear-mamba", "d_model": d, "d_state": n},
                    "train": train}).to_dict()


def card_step(args) -> int:
    """The card, in this process (``--card-only``): card/card.json with its wall time."""
    from recallbench.runs.packing import run_card

    out = Path(args.out) / "card"
    out.mkdir(parents=True, exist_ok=True)
    d, n, v = (8, 4, 64) if args.quick else (32, 8, 512)
    base = card_base(args.device, args.quick, d, n, v)
    t0 = time.monotonic()
    result = run_card(base, seeds=(0, 1), store=out / "store", time_limit_s=args.time_limit,
                      say=lambda line: print(line, flush=True))
    wall = time.monotonic() - t0
    n50 = result.card.get("n50") or {}
    row = {"adapter": "linear-mamba", "d_model": d, "d_state": n, "vocab": v,
           "wall_s": round(wall, 1), "finished": result.finished, "status": result.card.get("status"),
           "stopped": result.stopped, "runs": len(result.records), "n50": n50.get("value"),
           "n50_ci": n50.get("ci"), "work_mtok": result.card.get("work_mtok")}
    (out / "card.json").write_text(json.dumps({**row, "card": result.card}, indent=1, default=str))
    print(f"card: {row['status']} ({row['stopped']}) in {wall:.1f} s, {row['runs']} runs, "
          f"N50 {row['n50']}", flush=True)
    return 0


def versions() -> dict:
    import torch

    out = {"python": sys.version.split()[0], "torch": torch.__version__,
           "cpus": os.cpu_count()}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def parse(argv=None):
    p = Parser(prog=os.path.basename(__file__), description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT"), help="results folder (default $OUT)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--budget-s", type=float, default=510.0)
    p.add_argument("--only", nargs="+", choices=list(SHARES), default=list(SHARES))
    p.add_argument("--jobs", type=int, default=16, help="parity: adapters at once")
    p.add_argument("--card-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--time-limit", type=float, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.out:
        p.error("--out is required (or $OUT)")
    if not 10 <= args.budget_s <= MAX_BUDGET_S:
        p.error(f"--budget-s {args.budget_s:g} is not allowed: seconds in [10, {MAX_BUDGET_S}]")
    return args


def steps(c: Ctx, name: str, limit: float) -> dict:
    """One step's command, run under ``limit`` seconds; what it measured."""
    a, out, q = c.args, c.out, c.quick
    if name == "shares":
        cmd = PY + [str(BENCH / "step_shares.py"), "--device", c.device,
                    "--steps", "20" if q else "200"]
        r = c.call(name, cmd, limit)
        (out / "shares.txt").write_text(c.stdout(name))
        return {"command": r, "text": c.stdout(name)}
    if name == "packing":
        cell = QUICK_CELL if q else CELL + ["--facts", str(first_facts()), "--steps", "200",
                                            "--limit", "400", "--runs", "32", "--batch", "32",
                                            "--one-runs", "2"]
        cmd = PY + [str(BENCH / "bench_packing.py"), "--device", c.device, *cell,
                    "--modes", "one", "packed", "--out", str(out / "packing.jsonl")]
        r = c.call(name, cmd, limit)
        rows = read_jsonl(out / "packing.jsonl")
        ratio = next((x.get("ratio_to_one") for x in rows if x["mode"] == "packed"), None)
        return {"command": r, "rows": rows, "packed_ratio": ratio}
    if name == "card":
        cmd = PY + [__file__, "--card-only", "--out", str(out), "--device", c.device,
                    "--time-limit", f"{max(limit - 15, 5):.0f}"] + (["--quick"] if q else [])
        r = c.call(name, cmd, limit)
        path = out / "card" / "card.json"
        card = json.loads(path.read_text()) if path.exists() else {}
        card.pop("card", None)
        return {"command": r, **{f"card_{k}": v for k, v in card.items()}}
    jobs = 2 if q else a.jobs
    per = max(10.0, limit - 20)
    cmd = PY + [str(BENCH / "cuda_vs_cpu.py"), "--device", c.device, "--triton-f32", "ieee",
                "--out", str(out / "parity.jsonl"), "--time-limit", f"{per:.0f}",
                "--jobs", str(jobs), *(QUICK_PARITY if q else [])]
    r = c.call(name, cmd, limit)
    rows = read_jsonl(out / "parity.jsonl")
    return {"command": r, "parity_rows": sum("logits_rel_diff" in x for x in rows),
            "parity_adapters": len(rows)}


def first_facts() -> int:
    """N_f of the D32-N8 card's first batch."""
    from recallbench.runs.capacity import n_eff_prior
    from recallbench.runs.card_search import first_facts as ff

    base = card_base("cpu", False, 32, 8, 512)
    return ff(32, n_eff_prior(base), 512)


def main(argv=None) -> int:
    args = parse(argv)
    if args.card_only:
        return card_step(args)
    start = time.monotonic()
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"--out {out}: not empty; give a new or empty folder")
        return 2
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device here: run with --device cpu --quick for a dry run")
            return 2
    (out / "logs").mkdir(parents=True, exist_ok=True)
    c = Ctx(args, [], start)
    total = sum(SHARES[s] for s in args.only)
    plan = {s: args.budget_s * SHARES[s] / total for s in args.only}
    say(f"gpu_card: {args.device}, budget {args.budget_s:.0f} s: "
        + ", ".join(f"{s} {v:.0f} s" for s, v in plan.items()))
    summary = {"device": args.device, "quick": args.quick, "budget_s": args.budget_s,
               **versions(), "steps": {}}
    saved = 0.0
    for name in args.only:
        limit = min(plan[name] + saved, c.left() - 2)
        t0 = time.monotonic()
        got = steps(c, name, limit)
        took = time.monotonic() - t0
        saved = max(0.0, plan[name] + saved - took)
        status = got["command"]["status"]
        summary["steps"][name] = {"status": status, "seconds": round(took, 1),
                                  "why": got["command"].get("why")}
        for k in ("packed_ratio", "card_wall_s", "card_finished", "card_status", "card_n50",
                  "parity_rows", "parity_adapters"):
            if k in got:
                summary[k] = got[k]
        say(f"  {name}: {status} in {took:.0f} s"
            + "".join(f"; {k} {got[k]}" for k in ("packed_ratio", "card_wall_s", "card_finished",
                                                   "parity_rows", "parity_adapters") if k in got))
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    summary["seconds"] = round(time.monotonic() - start, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    say(f"gpu_card: {summary['seconds']} s; packed/one {summary.get('packed_ratio')}x (goal >= 20), "
        f"card {summary.get('card_wall_s')} s finished {summary.get('card_finished')} "
        f"(goal <= 120), parity rows {summary.get('parity_rows')} of "
        f"{summary.get('parity_adapters')} adapters")
    return 0 if all(s["status"] == "ok" for s in summary["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
