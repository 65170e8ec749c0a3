"""``recallbench score INPUT... --out DIR``: fit the law to result records, write a report.

INPUT is a result-store directory (its ``results.jsonl``), a ``.jsonl`` file or a
``.json`` file (a record or a list).  Writes ``DIR/report.json``, ``DIR/report.md`` and
``DIR/figures/*.png`` (see :mod:`recallbench.law.scorer`).  Exit status: 0; 1 when a result
beats the Fano bound (impossible: a leak or a bug) unless ``--allow-impossible``; 2 on bad
input (a ConfigError, printed by the CLI): an unreadable or binary file, a record whose
counts or rates are wrong (named by file, line and field), ``--out`` naming a file, or
inputs with no usable record (none ok with a test count).
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from recallbench.law import theory
from recallbench.api.errors import ConfigError
from recallbench.cli.study import check_out
from recallbench.law.records import SCHEMA


#: warnings printed; the rest are counted (report.json lists them all)
MAX_WARNINGS = 10


def _check_usable(records: list[dict], inputs: list[str]) -> None:
    """ConfigError unless some record is ok and has a test count (something to score)."""
    named = ", ".join(inputs[:3]) + (f" and {len(inputs) - 3} more" if len(inputs) > 3 else "")
    if not records:
        raise ConfigError(f"input {named}: holds no {SCHEMA} records")
    if not any(r.get("status") == "ok" and r.get("total") for r in records):
        errors = [str(r.get("error")) for r in records if r.get("error")]
        first = f" (first error: {errors[0][:120]})" if errors else ""
        raise ConfigError(f"input {named}: no usable records: none of its {len(records)} "
                          f"records is ok with a test count (total > 0){first}")


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
    parser.add_argument("--include-unconverged", action="store_true",
                        help="fit also the cells whose best run hit max_steps while improving, "
                             "at that lower bound (a sensitivity check; by default they are "
                             "shown but left out of every fit)")
    parser.add_argument("--credit-guessing", action="store_true",
                        help="score with the law alone, as versions before the guess level did: "
                             "accuracy at the task's guess level (1/N_f) then earns an effective "
                             "state (for comparing with old reports only)")
    parser.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    parser.add_argument("--allow-impossible", action="store_true",
                        help="exit 0 even when a result beats the Fano bound")


def command(args) -> int:
    """Run ``recallbench score``."""
    from recallbench.law.scorer import load_runs, score, write_report

    if not 0.0 < args.delta < 1.0:
        raise ConfigError(f"--delta = {args.delta!r} is not allowed: a probability strictly between 0 and 1")
    check_out(Path(args.out))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = load_runs(args.inputs)  # only what the scorer reads of each record
        load_notes = [str(w.message) for w in caught]
        _check_usable(records, args.inputs)
        collapse = {"auto": "auto", "always": True, "never": False}[args.collapse]
        report = score(records, collapse=collapse, form=args.form, delta=args.delta,
                       include_unconverged=args.include_unconverged,
                       guess=not args.credit_guessing)
    report["warnings"] = load_notes + report["warnings"]
    for note in report["warnings"][:MAX_WARNINGS]:
        print(f"recallbench: warning: {note}", file=sys.stderr)
    if len(report["warnings"]) > MAX_WARNINGS:
        print(f"recallbench: warning: ... and {len(report['warnings']) - MAX_WARNINGS} more "
              "(all in report.json)", file=sys.stderr)
    try:
        written = write_report(report, args.out, figures=not args.no_figures)
    except OSError as exc:
        raise ConfigError(f"--out {args.out}: cannot write the report ({exc.strerror})") from None
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
