"""``recallbench topk INPUT... [--out DIR]``: top-1 against top-k thresholds at two V.

INPUT is a result store, a ``.jsonl`` or a ``.json`` file, as for ``recallbench score``;
the runs must span exactly two vocabularies and share one ``train.top_k``.  Prints the
tables and the verdict (:mod:`recallbench.law.topk`); with ``--out`` also writes
``DIR/topk.json`` and ``DIR/topk.md``.  Exit status 0, or 2 on bad input (one line).
"""
from __future__ import annotations

import math

from recallbench.api.errors import ConfigError

NAMES = {"top1": "top-1", "topk": "top-k"}


def add_arguments(p) -> None:
    p.add_argument("inputs", nargs="+", help="result stores, .jsonl or .json files")
    p.add_argument("--out", help="directory for topk.json and topk.md (created if missing)")
    p.add_argument("--bootstrap", type=int, default=200, metavar="N",
                   help="bootstrap resamples for the intervals between the two V "
                        "(0..100000, default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    p.add_argument("--level", type=float, default=0.95, help="interval level in (0, 1) (default 0.95)")
    p.add_argument("--include-unconverged", action="store_true",
                   help="also use runs cut by max_steps while still improving (their accuracy "
                        "at the step budget; left out by default, as by recallbench score)")


def _ci(pair) -> str:
    return "[" + ", ".join("inf" if math.isinf(v) else f"{v:.2f}" for v in pair) + "]"


def to_markdown(res: dict) -> str:
    """The study's tables and verdict as Markdown."""
    k = res["top_k"]
    lines = [f"Runs used: {res['used']}, {res['unconverged_used']} of them cut by max_steps while "
             f"improving (left out: {res['left_out']}); a = {res['a']:g}; k = {k}.",
             "", "| V | metric | threshold x*² (fit) | profile CI | theory x*² | slope | "
             "mean abs(measured − theory) |", "|---|---|---|---|---|---|---|"]
    for c in res["curves"]:
        f = c["fit"]
        lines.append(f"| {c['vocab_size']:g} | {NAMES[c['metric']]} | {f['threshold']:.2f} | "
                     f"{_ci(f['threshold_ci'])} | {c['theory_threshold']:.2f} | {f['slope']:.2f} | "
                     f"{c['theory_gap']['mean_abs']:.3f} |")
    lines += ["", "| V | N_f | metric | threshold x*² | profile CI | theory x*² |", "|---|---|---|---|---|---|"]
    for c in res["by_num_facts"]:
        f = c["fit"]
        lines.append(f"| {c['vocab_size']:g} | {c['num_facts']:g} | {NAMES[c['metric']]} | "
                     f"{f['threshold']:.2f} | {_ci(f['threshold_ci'])} | {c['theory_threshold']:.2f} |")
    comp = res["comparison"]
    v = res["vocab_sizes"]
    lines += ["", f"| metric | τ({v[1]:g})/τ({v[0]:g}) | bootstrap CI | theory | "
              f"τ({v[1]:g}) − τ({v[0]:g}) | bootstrap CI | theory |", "|---|---|---|---|---|---|---|"]
    for m in ("top1", "topk"):
        c = comp[m]
        lines.append(f"| {NAMES[m]} | {c['ratio']:.2f} | {_ci(c['ratio_ci'])} | {c['theory_ratio']:.2f} | "
                     f"{c['difference']:.2f} | {_ci(c['difference_ci'])} | {c['theory_difference']:.2f} |")
    r, d = comp["ratio_gap"], comp["difference_gap"]
    lines.append(f"| top-k − top-1 | {r['value']:+.2f} | {_ci(r['ci'])} | {r['theory']:+.2f} "
                 f"| {d['value']:+.2f} | {_ci(d['ci'])} | {d['theory']:+.2f} |")
    lines += ["", f"log V ratio: {comp['log_v_ratio']:.3f}; bootstrap: {res['bootstrap']['n']} "
              f"resamples ({res['bootstrap']['failed']} degenerate).", "", f"**Verdict**: {res['verdict']}."]
    return "\n".join(lines) + "\n"


def command(args) -> int:
    if not 0 <= args.bootstrap <= 100_000:
        raise ConfigError(f"--bootstrap {args.bootstrap} is not allowed: an integer in [0, 100000]")
    from recallbench.cli.study import report
    from recallbench.law import topk

    return report(args, "topk", lambda records: topk.analyse(
        records, n_boot=args.bootstrap, seed=args.seed, level=args.level,
        include_unconverged=args.include_unconverged), to_markdown)
