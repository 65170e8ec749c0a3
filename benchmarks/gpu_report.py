"""Markdown tables of what ``benchmarks/gpu_run.py`` measured, from its output folders.

    python benchmarks/gpu_report.py docs/results/gpu/first docs/results/gpu/rerun

Each folder is one ``gpu_run.py --out DIR``; later folders fill in what earlier ones did not
measure (the ``run`` column says which folder a number comes from, counting from 1).  A
cell that no folder measured says "not measured" and why, from the first folder that tried
it: a bound or a guess is never printed in its place.  Prints four tables: parity under
both float32 settings, the Table-8 runs, the throughput ratios and the leaderboard chunk.
"""
from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path

from gpu_calls import read_jsonl  # benchmarks/

SETTINGS = ("ieee", "default")


@cache  # each file read once, not once per adapter and setting that looks into it
def rows(folder: Path, name: str) -> list[dict]:
    return read_jsonl(folder / name)


def steps(folder: Path) -> dict[str, dict]:
    return {r["step"]: r for r in rows(folder, "steps.jsonl")}


def first_measured(folders: list[Path], get) -> tuple[int | None, dict | None, str]:
    """(run number, row) from the first folder whose ``get(folder)`` is measured, else
    (None, None, why the first folder that tried it gives)."""
    why = "not run"
    for i, folder in enumerate(folders, 1):
        row, reason = get(folder)
        if row is not None:
            return i, row, ""
        if reason and why == "not run":
            why = reason
    return None, None, why


def parity_get(adapter: str, dot: str):
    def get(folder: Path):
        step = steps(folder).get(f"parity-{dot}")
        if step is None:
            return None, None
        for r in rows(folder, f"parity-{dot}.jsonl"):
            if r["adapter"] == adapter:
                return (None, r["error"]) if "error" in r else (r, None)
        return None, f"not reached: the step ran past its {step['limit_s']:.0f} s"
    return get


def parity_table(folders: list[Path], adapters: list[str]) -> list[str]:
    out = ["| adapter | float32 dots | logits gap | largest gradient gap (overall scale) | "
           "its own scale | CPU ms | GPU ms | run |", "|---|---|---|---|---|---|---|---|"]
    for name in adapters:
        for dot in SETTINGS:
            run, r, why = first_measured(folders, parity_get(name, dot))
            if r is None:
                out.append(f"| {name} | {dot} | not measured: {why} | | | | | |")
                continue
            own = (f"{r['grad_rel_diff']:.1e} ({r['worst_param_own']})"
                   if r["worst_param_own"] else "0")
            out.append(f"| {name} | {dot} | {r['logits_rel_diff']:.1e} | "
                       f"{r['grad_rel_diff_overall']:.1e} | {own} | {r['cpu_ms']:.1f} | "
                       f"{r['other_ms']:.2f} | {run} |")
    return out


def table8_table(folders: list[Path], adapters: list[str]) -> list[str]:
    out = ["| adapter | kernels | steps to 0.99 | train s | ms a step (validation in) | "
           "test accuracy | process s | "
           "runs at once | run |", "|---|---|---|---|---|---|---|---|---|"]

    def getter(name):
        def get(folder: Path):
            for r in rows(folder, "table8.jsonl"):
                if r["adapter"] == name:
                    return (r, None) if r["status"] == "ok" else (None, f"{r['status']}: {r['why']}")
            return None, None
        return get

    for name in adapters:
        run, r, why = first_measured(folders, getter(name))
        if r is None:
            out.append(f"| {name} | | not measured: {why} | | | | | | |")
            continue
        to99 = r["steps_to_0.99"]
        per = f"{1000 * r['train_s'] / r['steps']:.1f}" if r["steps"] else "–"
        reached = (to99 if to99 is not None else f"not reached in {r['steps']}" if r["steps"]
                   else "not trained")
        out.append(f"| {name} | {(r['kernels'] or {}).get('path')} | {reached} | "
                   f"{r['train_s']:.1f} | {per} | {r['accuracy']:.4f} | {r['process_s']:.1f} | "
                   f"{r['concurrent']} | {run} |")
    return out


def throughput_table(folders: list[Path]) -> list[str]:
    out = ["| run | cell | mode | n | runs | wall s | runs per hour | ratio to sequential |",
           "|---|---|---|---|---|---|---|---|"]
    for i, folder in enumerate(folders, 1):
        for r in rows(folder, "throughput.jsonl"):
            out.append(f"| {i} | {r['cell']} | {r['mode']} | {r['n']} | {r['runs']} | "
                       f"{r['wall_s']:.1f} | {r['runs_per_hour']:.0f} | {r['ratio']:.2f} |")
        step = steps(folder).get("throughput")
        if step and step["status"] != "ok":
            out.append(f"| {i} | | not measured after these rows: {step['why']} | | | | | |")
    return out


def leaderboard_lines(folders: list[Path]) -> list[str]:
    out = []
    for i, folder in enumerate(folders, 1):
        s = steps(folder).get("leaderboard")
        if not s:
            continue
        eta = s["eta_min"]
        calls = s["calls_of_480s"]
        out.append(f"- run {i}: {s['suite']}, {s['points']} points; dry-run ETA "
                   + (f"{eta[0]:.1f} to {eta[1]:.1f} min on {s['workers']} workers, "
                      f"{calls['from_eta'][0]} to {calls['from_eta'][1]} calls of 480 s"
                      if eta else "not measured")
                   + f"; the chunk stored {s['chunk_points']} points in {s['chunk_s']:.0f} s"
                   + (f" ({s['why']})" if s["why"] else ""))
    return out


def report(folders: list[Path]) -> str:
    summary = json.loads((folders[0] / "summary.json").read_text())
    adapters = summary["adapters"]
    head = (f"{summary['device']}, python {summary['python']}, torch {summary['torch']} "
            f"(CUDA {summary['torch_cuda']}), Triton {summary['triton']}; "
            f"{len(adapters)} adapters")
    parts = [head, "", "### Parity: the CUDA path against the CPU path", "",
             *parity_table(folders, adapters), "", "### Table 8: time to 0.99", "",
             *table8_table(folders, adapters), "", "### Throughput (linear-mamba)", "",
             *throughput_table(folders), "", "### gpu-standard leaderboard, linear-mamba", "",
             *leaderboard_lines(folders)]
    return "\n".join(parts) + "\n"


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("gpu_report.py: give one or more gpu_run.py output folders", file=sys.stderr)
        return 2
    folders = [Path(a) for a in args]
    for f in folders:
        if not (f / "summary.json").is_file():
            print(f"gpu_report.py: {f}: no summary.json (not a gpu_run.py output folder)",
                  file=sys.stderr)
            return 2
    sys.stdout.write(report(folders))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
