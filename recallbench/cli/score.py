"""``recallbench score INPUT... --out DIR``: fit the law to result records, write a report.

INPUT is a result-store directory (its ``results.jsonl``), a ``.jsonl`` file or a
``.json`` file (a record or a list).  Writes ``DIR/report.json``, ``DIR/report.md`` and
``DIR/figures/*.png`` (see :mod:`recallbench.law.scorer`).  Exit status: 0; 1 when a result
beats the Fano bound (impossible: a leak or a bug) unless ``--allow-impossible``; 2 on bad
input (a ConfigError, printed by the CLI).
"""
from __future__ import annotations

import argparse
import sys
import warnings

from recallbench.law import theory
from recallbench.api.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``recallbench score``."""
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="result store directory, .jsonl or .json file(s)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--collapse", choices=("auto", "always", "never"), default="auto",
                        help="collapse fit: auto (adapters of the law kinds designed and linear), "
                             "always, never")
    parser.add_argument("--form", choices=theory.FORMS, default="eq19",
                        help="law form for the effective state (default eq19)")
    parser.add_argument("--delta", type=float, default=0.01,
                        help="failure probability δ of the capacity N_f*(δ) (default 0.01)")
    parser.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    parser.add_argument("--allow-impossible", action="store_true",
                        help="exit 0 even when a result beats the Fano bound")


def command(args) -> int:
    """Run ``recallbench score``."""
    from recallbench.law.scorer import load_records, score, write_report

    if not 0.0 < args.delta < 1.0:
        raise ConfigError(f"--delta = {args.delta!r} is not allowed: a probability strictly between 0 and 1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = load_records(args.inputs)
        load_notes = [str(w.message) for w in caught]
        if not records:
            raise ConfigError("INPUT holds no recallbench.result/1 records")
        collapse = {"auto": "auto", "always": True, "never": False}[args.collapse]
        report = score(records, collapse=collapse, form=args.form, delta=args.delta)
    report["warnings"] = load_notes + report["warnings"]
    for note in report["warnings"]:
        print(f"warning: {note}", file=sys.stderr)
    written = write_report(report, args.out, figures=not args.no_figures)
    print(f"scored {report['n_runs']} runs ({report['n_ok']} ok, {report['n_failed']} failed) "
          f"in {len(report['groups'])} group(s)")
    for g in report["groups"]:
        col = (g.get("collapse") or {}).get("best") or {}
        eff = (g.get("efficiency") or {}).get("best") or {}
        bits = [g["id"]]
        if col.get("a") is not None:
            bits.append(f"a = {col['a']:.3g} (paper {col['paper_a']}), b = {col['b']:.3g} "
                        f"(paper {col['paper_b']:.3g})")
        if eff.get("ratio") is not None:
            bits.append(f"S_eff/S = {eff['ratio']:.3g}")
        print("  " + "; ".join(bits))
    print(f"wrote {written['json']}, {written['markdown']} and {len(written['figures'])} figure(s)")
    if report["impossible"]:
        print(f"IMPOSSIBLE: {len(report['impossible'])} result(s) beat the Fano bound (Lem 4.5): "
              "a leak or a bug; see the report", file=sys.stderr)
        return 0 if args.allow_impossible else 1
    return 0
