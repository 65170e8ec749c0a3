"""The ``recallbench`` command line.

    recallbench list tasks|adapters
    recallbench run [CONFIG.yaml] [--set section.key=value ...] [--out result.json]
    recallbench theory ...      (predictions of the scaling law)
    recallbench score INPUT... --out DIR

A user's mistake (bad config, unknown name, unreadable file) prints one line
``recallbench: error: ...`` and exits with status 2, without a traceback.  Only the
chosen subcommand's module is imported, and ``run`` checks its config and its ``--out``
before torch and Lightning load, so a bad config is rejected in a fraction of a second.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

from recallbench.api.errors import ConfigError, UnavailableError
from recallbench.api.fields import short

# subcommand → (module with add_arguments(parser) and command(args), help)
EXTERNAL = {
    "theory": ("recallbench.cli.theory", "predicted recall and required state from the law"),
    "score": ("recallbench.cli.score", "fit the law to results and write a report"),
    "capacity": ("recallbench.cli.capacity",
                 "measure one model's recall capacity at one state budget: its capacity card"),
    "sweep": ("recallbench.cli.sweep", "run a grid of configs into a resumable result store"),
    "submit": ("recallbench.cli.submit", "turn a result store into a leaderboard submission"),
    "leaderboard": ("recallbench.cli.leaderboard", "validate, verify and render leaderboards"),
    "doctor": ("recallbench.cli.doctor", "devices, versions, and the kernels each adapter runs here"),
    "probe": ("recallbench.cli.probe", "mechanistic probe of a trained or designed recall circuit"),
    "topk": ("recallbench.cli.topk", "top-1 against top-k recall thresholds at two vocabularies"),
    "vocab": ("recallbench.cli.vocab", "how recall falls with V: the slope of Φ⁻¹(accuracy) against m_V"),
}

#: exit statuses of ``recallbench run`` (README, "Running one model"; ``run --help``)
EXIT_NOT_WRITTEN, EXIT_USAGE, EXIT_DIVERGED, EXIT_PIPE = 1, 2, 3, 141
RUN_EXIT_STATUS = """exit status:
  0    the run finished and its record was written
  1    the record could not be written to --out after the run (the message says
       where it was saved instead)
  2    a bad config, flag or file, or a run that would not fit in memory
       (one line names the field; nothing was run)
  3    the run diverged: its training loss became NaN or infinite (lower train.lr);
       a record with status "failed" and the reason is written to --out
  130  interrupted (Ctrl-C)"""


class Parser(argparse.ArgumentParser):
    """argparse, with its error line bounded (it echoes what the user typed)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {short(message, 300)[1:-1]}\n")


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


def _where(path: Path) -> str:
    return short(str(path), 160)[1:-1]


def check_writable(path: Path, flag: str = "--out") -> None:
    """ConfigError (one line naming ``flag``) unless a file can be written at ``path``;
    its folder is created if needed."""
    from recallbench.api.safe_files import special_kind

    if path.is_dir():
        raise ConfigError(f"{flag} {_where(path)} is a folder: give a file name, "
                          "e.g. result.json inside it")
    kind = special_kind(path)
    if kind is not None:  # writing would block (a FIFO) or go nowhere (a device)
        raise ConfigError(f"{flag} {_where(path)} is {kind}, not a regular file: "
                          "give the name of a file to write")
    existing = next(p for p in path.absolute().parents if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"{flag} {_where(path)}: {_where(existing)} is not a folder (it is a file)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".recallbench-"):
            pass
    except OSError as exc:
        raise ConfigError(f"{flag} {_where(path)}: cannot write a file there "
                          f"({exc.strerror or type(exc).__name__})") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{flag} {_where(path)}: the file is not writable")


def save_record(record: dict, out: Path) -> tuple[str, str | None]:
    """Write ``record`` to ``out``; if that fails, to a new file in the temp folder (an
    unguessable name, created exclusively: never through a planted link), and if that
    fails too, print it on stdout: never lost.  Returns (where it went, why not ``out``)."""
    from recallbench.api.safe_files import write_aside, write_regular

    text = json.dumps(record, indent=2) + "\n"
    try:
        write_regular(out, text)  # a FIFO or device put there since the check: refused
        return str(out), None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
    fallback = write_aside(text, f"recallbench-{str(record.get('config_hash'))[:12]}-",
                           ".json", [None])
    if fallback is not None:
        return str(fallback), reason
    print(text, end="")
    return "standard output (above)", reason


def _summary(record: dict, cfg) -> None:
    task, model = record["config"]["task"], record["config"]["model"]
    state = record["state_size"] if record["state_size"] is not None else record["state_note"]
    print(f"{task['name']} V={task['vocab_size']} L={cfg.task.length} N_f={task['num_facts']} | "
          f"{model['adapter']} D={model['d_model']} N={model['d_state']} "
          f"layers={model['n_layers']}")
    print(f"accuracy {record['accuracy']:.4f} ({record['correct']}/{record['total']} queries), "
          f"top-{record['top_k']} {record['accuracy_topk']:.4f}")
    print(f"state_size {state} | params {record['params']} | steps {record['steps']} | "
          f"wall {record['wall_s']:.1f}s | seed {record['seed']} | {record['device']}")
    print(f"lr {record['lr']:g}"
          + (f" (best of {len(record['lr_search'])} by validation)" if record["lr_search"] else "")
          + f" | {'converged' if record['converged'] else 'NOT converged'} "
          f"({record['stop_reason']})")


def _run(args) -> int:
    from recallbench.api.config import apply_overrides, load_yaml, lr_text, resolve

    out = Path(args.out) if args.out else None
    if out is not None:
        check_writable(out)
    raw = load_yaml(args.config) if args.config else {}
    cfg = resolve(apply_overrides(raw, args.set or []))  # plugins (torch) load only if sane
    if out is None:
        out = Path("runs") / f"{cfg.hash()[:12]}.json"
        check_writable(out)

    from recallbench.api.record import failed_record
    from recallbench.harness.module import DivergedError
    from recallbench.harness.train import run

    weights = out.with_suffix(".pt") if args.save_weights else None
    if weights == out:  # --out x.pt: never let the record overwrite the weights
        weights = out.with_name(out.name + ".pt")
    if weights is not None:
        check_writable(weights, "--save-weights")
    try:
        record = run(cfg, progress=False if args.quiet else None, weights=weights)
    except DivergedError as exc:
        where, why = save_record(failed_record(cfg, str(exc)), out)
        print(f"recallbench: run diverged: {exc} with train.lr = {lr_text(cfg.train.lr)} "
              f"(try a lower one); failed record written to {where}"
              + (f" (not --out: {why})" if why else ""), file=sys.stderr)
        return EXIT_DIVERGED
    _summary(record, cfg)
    where, why = save_record(record, out)
    if why:
        print(f"recallbench: error: cannot write --out {_where(out)} ({why}); "
              f"the record was saved to {where}", file=sys.stderr)
        return EXIT_NOT_WRITTEN
    print(f"result written to {where}" + (f", weights to {weights}" if weights else ""))
    return 0


def _unavailable(name: str, exc: Exception):
    def command(args) -> int:
        raise UnavailableError(f"`recallbench {name}` cannot load: {exc}")

    return command


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; of the EXTERNAL subcommands only the one named in ``argv`` is imported
    (its module may load numpy, scipy or torch), the others are listed by name."""
    parser = Parser(prog="recallbench",
                    description="Measure recall of sequence models against their state size.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="registered tasks or adapters, and whether they run here")
    p.add_argument("what", choices=["tasks", "adapters"])
    p.set_defaults(func=_list)

    p = sub.add_parser("run", help="train and test one model on one task",
                       epilog=RUN_EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", help="YAML with sections task, model, train "
                   "(default: MQAR V=128 L=64 N_f=16, linear-mamba D=64 N=16)")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override a config value; repeatable, several pairs per argument")
    p.add_argument("--out", help="where to write the result JSON (default runs/<hash>.json); "
                   "checked writable before the run")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--save-weights", action="store_true",
                   help="also save the trained weights beside the record (its path with .pt), "
                        "for `recallbench probe`")
    p.set_defaults(func=_run)

    chosen = next((a for a in argv or [] if not a.startswith("-")), None)
    for name, (module, help_text) in EXTERNAL.items():
        if name != chosen:
            sub.add_parser(name, help=help_text, add_help=False)
            continue
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
    """``warnings.showwarning`` printing recallbench's own warnings (a store's torn line, a
    skipped record) as one line each, ``recallbench: warning: ...``; others go to ``show``."""
    def showwarning(message, category, filename, lineno, file=None, line=None):
        if not category.__module__.startswith("recallbench"):
            return show(message, category, filename, lineno, file, line)
        text = (str(message).splitlines() or [category.__name__])[0]
        print(f"recallbench: warning: {text[:500]}", file=file or sys.stderr)
    return showwarning


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_line(warnings.showwarning)
            return int(args.func(args) or 0)
    except (ConfigError, UnavailableError) as exc:
        print(f"recallbench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("recallbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early: the rest is not done
        try:  # no second error when Python flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            print("recallbench: error: output closed early (broken pipe); stopped",
                  file=sys.stderr)
        except (OSError, ValueError):  # stdout is not a file (captured in-process)
            pass
        return EXIT_PIPE


if __name__ == "__main__":
    sys.exit(main())
