"""``recallbench submit``: turn a result store into a leaderboard submission.

    recallbench submit --suite leaderboards/cpu-small --store STORE --model-name NAME
                       [--adapter NAME] [--shape TERM=V] [--description TEXT] [--url URL]
                       [--out FILE]

The store's records that fill the suite's grid (for one adapter) become a submission
YAML with per-point counts, the scorer's fitted effective state, capacity and Fano ratio,
and a sha256 over its content.  Default output: <suite>/submissions/<model-name>.yaml.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from recallbench.api.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", required=True, help="suite folder (holds suite.yaml)")
    parser.add_argument("--store", required=True, nargs="+",
                        help="result store folder(s) or .jsonl/.json files")
    parser.add_argument("--model-name", required=True,
                        help="name on the leaderboard (letters, digits, . _ + -)")
    parser.add_argument("--adapter", help="which adapter's runs (needed if the store holds several)")
    parser.add_argument("--shape", metavar="TERM=V",
                        help="a capacity suite of card method 2: the runs of `leaderboard run "
                             "--shape TERM=V` (the adapter at another shape of each budget's S)")
    parser.add_argument("--description", help="one line about the model")
    parser.add_argument("--url", help="code or paper link")
    parser.add_argument("--out", help="output file (default <suite>/submissions/<model-name>.yaml)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")


def _check_out(out: Path, force: bool) -> None:
    """The output can be written: a .yaml file in an existing-or-creatable folder."""
    if out.suffix not in (".yaml", ".yml"):
        raise ConfigError(f"--out {out}: submissions are .yaml files")
    from recallbench.cli.main import check_writable
    from recallbench.leaderboard.checks import check_file_name

    try:  # validate refuses any other name: refuse it before the work, not after
        check_file_name(out)
    except ConfigError as exc:
        raise ConfigError(f"--out {exc}") from None

    if (out.exists() or out.is_symlink()) and not out.is_dir() and not force:
        raise ConfigError(f"{out} exists (use --force to replace it)")
    check_writable(out)  # a file, in a folder that exists or can be made, that we may write


def _check_text(args) -> None:
    from recallbench.leaderboard.schema import MAX_TEXT

    for flag, value in (("--description", args.description), ("--url", args.url)):
        if value is not None and len(value) > MAX_TEXT:
            raise ConfigError(f"{flag}: {len(value)} characters; at most {MAX_TEXT}")


def _load(paths: list[str]) -> list[dict]:
    """The stores' records; their warnings (torn lines, skipped entries) as one line each."""
    from recallbench import leaderboard as lb

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = lb.load_store_records(paths)
    for w in caught[:20]:
        print(f"recallbench: warning: {str(w.message)[:300]}", file=sys.stderr)
    return records


def command(args) -> int:
    from recallbench import leaderboard as lb

    suite = lb.load_suite(args.suite)
    if suite.retired:
        raise ConfigError(f"suite {suite.name} is retired, no new submissions: {suite.retired}")
    lb.check_name(args.model_name, "--model-name")
    _check_text(args)
    out = Path(args.out) if args.out else suite.dir / lb.SUBMISSIONS_DIR / f"{lb.slug(args.model_name)}.yaml"
    if not args.out and out.parent.is_symlink():
        raise ConfigError(f"{out.parent}: the submissions folder is a symbolic link; not accepted")
    _check_out(out, args.force)
    shape = None
    if args.shape is not None:
        from recallbench.leaderboard.capacity.shape_entry import parse

        shape = parse(args.shape)
    records = _load(args.store)
    sub = lb.build_submission(suite, records, args.model_name, adapter=args.adapter,
                              description=args.description, url=args.url, shape=shape)
    try:
        lb.write_submission(sub, out)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write ({exc.strerror})") from None
    for b in sub["budgets"]:
        if "card" in b:  # a capacity suite: the card's headline, by its method's renderer
            from recallbench.law import card_render, run_card, run_card_render

            render = (run_card_render if b["card"].get("schema") == run_card.CARD_SCHEMA
                      else card_render)
            print(f"{sub['model']['name']} budget {b['name']}: "
                  f"{render.headline({**b['card'], 'model': b['config']['model']})}")
            continue
        sc = (b.get("score") or {}).get("mean") or {}
        acc = lb.acc_by_nf(b)
        print(f"{sub['model']['name']} ({sub['model']['adapter']}) budget {b['name']}: state "
              f"{b['state_size']}, S_eff {lb.fmt(sc.get('s_eff'), '.4g')}, N_f* "
              f"{lb.fmt(sc.get('capacity'), '.3g')}, Fano ratio {lb.fmt(sc.get('bits_ratio'), '.3g')}; "
              + ", ".join(f"N_f={k}: {v:.3f}" for k, v in sorted(acc.items())))
    if sub["impossible"]:
        print("WARNING: the scorer flags impossible results (beats the Fano bound): validate will reject it")
    print(f"submission written to {out} (sha256 {sub['sha256'][:12]}…)")
    return 0
