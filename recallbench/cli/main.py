"""The ``recallbench`` command line.

    recallbench list tasks|adapters
    recallbench run [CONFIG.yaml] [--set section.key=value ...] [--out result.json]
    recallbench theory ...      (predictions of the scaling law)
    recallbench score INPUT... --out DIR

A user's mistake (bad config, unknown name, unreadable file) prints one line
``recallbench: error: ...`` and exits with status 2, without a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import warnings
from pathlib import Path

from recallbench.api.errors import ConfigError, UnavailableError

# subcommand → (module with add_arguments(parser) and command(args), help)
EXTERNAL = {
    "theory": ("recallbench.cli.theory", "predicted recall and required state from the law"),
    "score": ("recallbench.cli.score", "fit the law to results and write a report"),
    "sweep": ("recallbench.cli.sweep", "run a grid of configs into a resumable result store"),
    "submit": ("recallbench.cli.submit", "turn a result store into a leaderboard submission"),
    "leaderboard": ("recallbench.cli.leaderboard", "validate, verify and render leaderboards"),
}


def _list(args) -> int:
    from recallbench.api.registry import ADAPTERS, TASKS

    registry = TASKS if args.what == "tasks" else ADAPTERS
    rows = registry.describe()
    width = max(len(r[0]) for r in rows)
    for name, origin, ok, why in rows:
        obj = registry.get(name) if ok or origin == "built-in" else None
        desc = getattr(obj, "description", "") if obj is not None else ""
        status = "available" if ok else f"unavailable: {why}"
        print(f"{name:<{width}}  {status}")
        if desc:
            print(f"{'':<{width}}  {desc} [{origin}]")
    return 0


def _run(args) -> int:
    from recallbench.api.config import apply_overrides, load_yaml, resolve
    from recallbench.harness.train import run

    raw = load_yaml(args.config) if args.config else {}
    cfg = resolve(apply_overrides(raw, args.set or []))
    record = run(cfg, progress=False if args.quiet else None)
    out = Path(args.out) if args.out else Path("runs") / f"{record['config_hash'][:12]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    task, model = record["config"]["task"], record["config"]["model"]
    state = record["state_size"] if record["state_size"] is not None else record["state_note"]
    print(f"{task['name']} V={task['vocab_size']} L={cfg.task.length} N_f={task['num_facts']} | "
          f"{model['adapter']} D={model['d_model']} N={model['d_state']} "
          f"layers={model['n_layers']}")
    print(f"accuracy {record['accuracy']:.4f} ({record['correct']}/{record['total']} queries), "
          f"top-{record['top_k']} {record['accuracy_topk']:.4f}")
    print(f"state_size {state} | params {record['params']} | steps {record['steps']} | "
          f"wall {record['wall_s']:.1f}s | seed {record['seed']} | {record['device']}")
    print(f"result written to {out}")
    return 0


def _unavailable(name: str, exc: Exception):
    def command(args) -> int:
        raise UnavailableError(f"`recallbench {name}` cannot load: {exc}")

    return command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recallbench",
        description="Measure recall of sequence models against their state size.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="registered tasks or adapters, and whether they run here")
    p.add_argument("what", choices=["tasks", "adapters"])
    p.set_defaults(func=_list)

    p = sub.add_parser("run", help="train and test one model on one task")
    p.add_argument("config", nargs="?", help="YAML with sections task, model, train "
                   "(default: MQAR V=128 L=64 N_f=16, linear-mamba D=64 N=16)")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override a config value; repeatable, several pairs per argument")
    p.add_argument("--out", help="where to write the result JSON (default runs/<hash>.json)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)

    for name, (module, help_text) in EXTERNAL.items():
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:  # keep the rest of the CLI usable, and say why
            p = sub.add_parser(name, help=f"(unavailable: {exc})")
            p.set_defaults(func=_unavailable(name, exc))
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod.add_arguments(p)
        p.set_defaults(func=mod.command)
    return parser


def _warning_line(show):
    """``warnings.showwarning`` printing recallbench's own warnings as one line each,
    ``recallbench: warning: ...`` (no source file and line); others go to ``show``."""
    def showwarning(message, category, filename, lineno, file=None, line=None):
        if not category.__module__.startswith("recallbench"):
            return show(message, category, filename, lineno, file, line)
        text = (str(message).splitlines() or [category.__name__])[0]
        print(f"recallbench: warning: {text[:500]}", file=file or sys.stderr)
    return showwarning


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _warning_line(warnings.showwarning)
        return _call(args)


def _call(args) -> int:
    try:
        return int(args.func(args) or 0)
    except (ConfigError, UnavailableError) as exc:
        print(f"recallbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("recallbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early: the rest is not done
        try:  # no second error when Python flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            print("recallbench: error: output closed early (broken pipe); stopped",
                  file=sys.stderr)
        except (OSError, ValueError):
            pass
        return 141


if __name__ == "__main__":
    sys.exit(main())
