"""What the study commands share (``score``, ``topk``, ``vocab``): the check of ``--out``
and ``--level`` before any work, and, for ``topk`` and ``vocab``, one pass from result
records to an analysis whose tables are printed and, with ``--out``, written.

    check_out(Path(args.out))                       # a folder we may write, or can make
    return report(args, "vocab", analyse, to_markdown, figure=vocab.write_figure)
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from recallbench.api.errors import ConfigError


def check_out(out: Path) -> None:
    """ConfigError, before any work, unless ``out`` is a directory we may write or can make."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file: expected a directory (created if missing)")
    parent = out
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"--out {out}: {parent} is a file, so the directory cannot be made")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: {parent} is not writable")


def check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ConfigError(f"--level {level} is not allowed: a number in (0, 1)")


def report(args, name: str, analyse: Callable[[list], dict], to_markdown: Callable[[dict], str],
           figure: Callable[[dict, Path], object] | None = None) -> int:
    """Read ``args.inputs``, run ``analyse`` on the records (its ValueError is the user's
    input: one line), print ``to_markdown`` of the result and, with ``args.out``, write
    there the result as JSON and the Markdown, each named ``name`` (and the ``figure``'s
    PNG).  ``--out`` and ``--level`` are checked first."""
    check_level(args.level)
    out = Path(args.out) if args.out else None
    if out is not None:
        check_out(out)
    from recallbench.law.records import load_records

    records = load_records(args.inputs)
    try:
        res = analyse(records)
    except ValueError as exc:
        raise ConfigError(f"inputs: {exc}") from None
    text = to_markdown(res)
    print(text, end="")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        written = [out / f"{name}.json", out / f"{name}.md"]
        written[0].write_text(json.dumps(res, indent=1) + "\n")
        written[1].write_text(text)
        if figure is not None:
            written.append(out / f"{name}.png")
            figure(res, written[-1])
        print("written: " + ", ".join(str(p) for p in written))
    return 0
