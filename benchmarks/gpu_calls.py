"""The calls of ``benchmarks/gpu_run.py``: each command in its own process group under a time
limit, its output in ``logs/``, and the run's clock and options (:class:`Ctx`)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRACE_S = 5.0  # SIGTERM to SIGKILL


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def kill_group(proc: subprocess.Popen) -> None:
    """End ``proc``'s process group (it leads one): SIGTERM, then SIGKILL for what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:  # none left
            break
        try:
            proc.wait(timeout=GRACE_S if sig == signal.SIGTERM else None)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            pass
    proc.wait()


def last_line(path: str) -> str:
    lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


class Ctx:
    """One invocation: its options, output folder, adapters and clock."""

    def __init__(self, args, adapters: list[str], start: float):
        self.args, self.device, self.quick = args, args.device, args.quick
        self.out, self.adapters = Path(args.out), adapters
        self.start = start  # the budget counts from the script's start
        self.notes: dict[str, str] = {}  # adapter -> why it does not run fused here

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.start)

    def call(self, name: str, cmd: list[str], limit: float) -> dict:
        """``cmd`` in its own process group, stdout and stderr into logs/NAME.out/.err, the
        group killed after ``limit`` seconds, on Ctrl-C, and once the command is done."""
        if limit < 1:
            return {"label": name, "status": "timeout", "seconds": 0.0,
                    "why": "no time left in the budget"}
        log = self.out / "logs" / name
        t0 = time.monotonic()
        with open(f"{log}.out", "w") as out, open(f"{log}.err", "w") as err:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1",
                                                   # a line per kernel autotuned, with its time
                                                   "TRITON_PRINT_AUTOTUNING": "1"},
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                kill_group(proc)
        seconds = round(time.monotonic() - t0, 1)
        if rc is None:  # where it was: its last line, if it printed one
            last = last_line(f"{log}.err") or last_line(f"{log}.out")
            return {"label": name, "status": "timeout", "seconds": seconds,
                    "why": f"ran past {limit:.0f} s" + (f"; its last line: {last}" if last else "")}
        why = None if not rc else last_line(f"{log}.err") or last_line(f"{log}.out") or f"exit {rc}"
        return {"label": name, "status": "failed" if rc else "ok", "seconds": seconds, "why": why}

    def stdout(self, name: str) -> str:
        path = self.out / "logs" / f"{name}.out"
        return path.read_text(errors="replace") if path.exists() else ""


def read_jsonl(path: Path) -> list[dict]:
    text = path.read_text() if path.exists() else ""
    return [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]


def append_jsonl(path: Path, row: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")
