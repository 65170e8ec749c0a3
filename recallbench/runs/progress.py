"""Progress lines while a batch of runs trains: which run, which learning rate and step, its
latest validation accuracy and the time the batch has left, at least every :data:`SAY_S`
seconds per run and at each learning-rate candidate's start::

    capacity:   N_f = 49: run 1 of 2 (seed 0): lr 0.01 (candidate 2 of 3), step 1,250 of 2,000, val 0.412; about 6.1 min left in this batch

A cell of a capacity card can train for a quarter of an hour; without these lines nothing
is printed between its start and its end.

* **In the run** (this process or a worker process): a :class:`RunReport`, handed to
  :func:`recallbench.harness.train.run` as ``report``.  The lr search tells it when a
  candidate starts (:meth:`RunReport.candidate`), when the chosen one is extended
  (:meth:`RunReport.extending`), and the module after every optimizer step
  (:meth:`RunReport.after_step`: a look at the clock, no I/O).  It hands a status (a small
  dict) to its sink at each candidate's start and at most every :data:`REPORT_S` seconds.
  The report reads nothing the training uses and draws no random number: a run's record is
  the same with and without it.
* **In the driver**: a :class:`Watch` over an executor (``inprocess`` or ``processes``)
  sets the executor's runner to one that makes a report per run, and for each batch
  (:meth:`Watch.batch`) a daemon thread says the lines every :data:`POLL_S` seconds.  In
  this process the report's sink is the batch itself; from worker processes each run's
  status is a one-line JSON file, ``<config hash>.json``, written whole (a hidden name
  renamed over it) into a directory the Watch makes with :func:`tempfile.mkdtemp` (under
  the system's temporary directory) and removes when it closes.  A worker that cannot
  write there (the directory gone) stays silent; it never makes the directory again.

**ETA**: each run's steps left at its own rate so far (its steps done over its time since
it started, building and validation included): the rest of its current candidate's cap
plus ``max_steps`` for each candidate after it; a run not started yet counts all of its
candidates at the batch's mean rate, on the first of the executor's ``parallel`` slots to
come free.  The extension of the chosen candidate (``max_steps_limit``) cannot be known
before it happens: while one may follow, the line says "at least".
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

#: seconds between a run's status updates (written by a worker; a clock check per step)
REPORT_S = 5.0
#: seconds between the driver's looks at the statuses
POLL_S = 2.0
#: a line for each run at least this often (and at each candidate's start)
SAY_S = 30.0
#: what the lines start with
PREFIX = "capacity:   "


# -- in the run ------------------------------------------------------------------------------

class RunReport:
    """The progress of one run (module doc), handed to ``sink`` as a status dict."""

    def __init__(self, key: str, sink: Callable[[dict], None], every_s: float = REPORT_S,
                 clock: Callable[[], float] = time.monotonic):
        self.key, self.sink, self.every_s, self.clock = key, sink, every_s, clock
        self.start = clock()
        self.next = self.start + every_s
        self.phase, self.i, self.n = "starting", 0, 1
        self.lr: Any = None
        self.lrs: list | None = None
        self.step = self.offset = self.cap = self.after = self.done = 0
        self.val: float | None = None
        self.limit: int | None = None

    def candidate(self, i: int, n: int, lr: float, max_steps: int,
                  limit: int | None = None) -> None:
        """Candidate ``i`` (0-based) of ``n`` starts, at ``lr``, capped at ``max_steps``;
        ``limit``: the search's ``max_steps_limit`` (an extension may follow)."""
        self.done += self.step - self.offset
        self.phase, self.i, self.n, self.lr = "candidate", i, n, lr
        self.step = self.offset = 0
        self.cap, self.after, self.limit = max_steps, (n - i - 1) * max_steps, limit
        self.val = None
        self.send()

    def extending(self, lr: float, step: int, cap: int) -> None:
        """The chosen candidate (``lr``) goes on from its cap, ``step`` steps in, to ``cap``."""
        self.done += self.step - self.offset
        self.phase, self.lr, self.step, self.offset, self.cap, self.after = \
            "extending", lr, step, step, cap, 0
        self.send()

    def batched(self, lrs: Sequence[float], max_steps: int) -> None:
        """The candidates train as one batched ensemble (no steps reported)."""
        self.phase, self.lrs, self.n, self.cap, self.after = "batched", list(lrs), len(lrs), \
            max_steps, 0
        self.send()

    def after_step(self, step: int, cap: int, val: float | None) -> None:
        """After an optimizer step: ``step`` steps done of the candidate's current ``cap``,
        ``val`` its latest validation accuracy.  Sent only when :data:`REPORT_S` is up."""
        self.step, self.cap, self.val = step, cap, val
        if self.clock() >= self.next:
            self.send()

    def status(self) -> dict:
        elapsed = self.clock() - self.start
        done = self.done + self.step - self.offset
        return {"key": self.key, "phase": self.phase, "i": self.i, "n": self.n, "lr": self.lr,
                "lrs": self.lrs, "step": self.step, "cap": self.cap, "val": self.val,
                "done": done, "left": max(self.cap - self.step, 0) + self.after,
                "more": self.limit is not None and self.cap < self.limit,
                "elapsed": elapsed, "rate": done / elapsed if done and elapsed > 0 else None}

    def send(self) -> None:
        self.next = self.clock() + self.every_s
        try:
            self.sink(self.status())
        except Exception:  # progress never stops a run
            pass


class LocalReports:
    """Reports for runs in this process: each run's status goes to ``sink``."""

    def __init__(self, sink: Callable[[dict], None], every_s: float = REPORT_S):
        self.sink, self.every_s = sink, every_s

    def __call__(self, cfg) -> RunReport:
        return RunReport(cfg.hash(), self.sink, self.every_s)


class StatusFiles:
    """Reports for runs in worker processes: each run's status in ``<directory>/<hash>.json``
    (picklable: it goes to the worker with each run)."""

    def __init__(self, directory: str, every_s: float = REPORT_S):
        self.directory, self.every_s = str(directory), every_s

    def __call__(self, cfg) -> RunReport:
        path = status_path(self.directory, cfg.hash())
        return RunReport(path.stem, lambda status: write_status(path, status), self.every_s)


def status_path(directory: str | Path, key: str) -> Path:
    return Path(directory) / f"{key}.json"


def write_status(path: Path, status: Mapping) -> None:
    """``status`` as one JSON line at ``path``, whole or not at all; nothing when the
    directory is gone."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(status) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


def read_status(path: Path) -> dict | None:
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


# -- in the driver ---------------------------------------------------------------------------

class Watch:
    """Progress lines for the batches an executor runs (module doc); inert when ``say`` is
    None or the executor is neither ``inprocess`` nor ``processes``.  :meth:`close` removes
    its directory (after the executor has stopped its workers)."""

    def __init__(self, executor, say: Callable[[str], None] | None, *,
                 every_s: float | None = None, poll_s: float | None = None,
                 report_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.say, self.dir = say, None
        self.every_s = SAY_S if every_s is None else every_s
        self.poll_s = POLL_S if poll_s is None else poll_s
        self.clock = clock
        self.parallel = max(int(getattr(executor, "parallel", 1) or 1), 1)
        self._batch: Batch | None = None
        if say is None:
            return
        from recallbench.harness.train import Reported

        report_s = REPORT_S if report_s is None else report_s
        name = getattr(executor, "name", None)
        if name == "inprocess":
            executor.runner = Reported(LocalReports(self._update, report_s))
        elif name == "processes":
            self.dir = tempfile.mkdtemp(prefix="recallbench-progress-")
            executor.runner = Reported(StatusFiles(self.dir, report_s))
        else:
            self.say = None

    def _update(self, status: dict) -> None:
        batch = self._batch
        if batch is not None:
            batch.update(status)

    @contextlib.contextmanager
    def batch(self, cfgs: Sequence[Mapping]):
        """While the runs of ``cfgs`` (canonical config dicts, in the batch's order) train:
        yields the :class:`Batch` (call ``finished(index)`` as each run's result comes)."""
        if self.say is None:
            yield Batch(cfgs, None, self.parallel)
            return
        batch = Batch(cfgs, self.say, self.parallel, self.every_s, self.clock)
        stop = threading.Event()
        thread = threading.Thread(target=self._poll, args=(batch, stop), daemon=True,
                                  name="recallbench-progress")
        self._batch = batch
        thread.start()
        try:
            yield batch
        finally:
            stop.set()
            thread.join()
            self._batch = None
            if self.dir is not None:
                for run in batch.runs:
                    with contextlib.suppress(OSError):
                        status_path(self.dir, run.key).unlink()

    def _poll(self, batch: Batch, stop: threading.Event) -> None:
        while not stop.wait(self.poll_s):
            try:
                if self.dir is not None:
                    for run in batch.active(started=False):
                        status = read_status(status_path(self.dir, run.key))
                        if status is not None:
                            batch.update(status)
                batch.tick()
            except Exception:  # a line that could not be said: the training goes on
                pass

    def close(self) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


class _Run:
    def __init__(self, index: int, cfg: Mapping):
        from recallbench.api.canonical import config_hash

        train, task = cfg.get("train") or {}, cfg.get("task") or {}
        lrs = train.get("lr")
        steps = int(train.get("max_steps") or 0)
        limit = train.get("max_steps_limit")
        self.index, self.key = index, config_hash(cfg)
        self.seed, self.num_facts = train.get("seed"), task.get("num_facts")
        self.steps = (len(lrs) if isinstance(lrs, list) else 1) * steps  # before any extension
        self.more = limit is not None and int(limit) > steps
        self.status: dict | None = None
        self.finished = False
        self.said: float | None = None


class Batch:
    """The runs of one batch and what they last reported; says a line per run (module doc)."""

    def __init__(self, cfgs: Sequence[Mapping], say: Callable[[str], None] | None,
                 parallel: int = 1, every_s: float = SAY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.runs = [_Run(i, c) for i, c in enumerate(cfgs)]
        self.by_key = {r.key: r for r in self.runs}
        self.say, self.parallel, self.every_s, self.clock = say, parallel, every_s, clock
        self.rates: list[float] = []  # of the runs finished
        self.lock = threading.Lock()

    def active(self, started: bool = True) -> list[_Run]:
        return [r for r in self.runs
                if not r.finished and (r.status is not None or not started)]

    def finished(self, index: int) -> None:
        with self.lock:
            run = self.runs[index]
            run.finished = True
            if run.status is not None and run.status.get("rate"):
                self.rates.append(run.status["rate"])

    def update(self, status: Mapping) -> None:
        """A run's latest status; a line at once when it starts a candidate (or anew)."""
        with self.lock:
            run = self.by_key.get(status.get("key"))
            if run is None or run.finished:
                return
            before = run.status
            run.status = dict(status)
            if before is None or (before["phase"], before["i"]) != (status["phase"], status["i"]):
                self._say(run)

    def tick(self) -> None:
        """A line for each run not heard of for ``every_s`` seconds."""
        with self.lock:
            now = self.clock()
            for run in self.active():
                if run.said is None or now - run.said >= self.every_s:
                    self._say(run)

    def _say(self, run: _Run) -> None:
        run.said = self.clock()
        if self.say is not None:
            self.say(self.line(run))

    def line(self, run: _Run) -> str:
        s = run.status or {}
        head = (f"{PREFIX}N_f = {run.num_facts}: run {run.index + 1} of {len(self.runs)}"
                f" (seed {run.seed}): ")
        if s.get("phase") == "batched":
            what = (f"lrs {', '.join(f'{lr:g}' for lr in s['lrs'])} trained as one batch, "
                    f"{s['elapsed'] / 60:.1f} min so far")
        else:
            lr = f"lr {s['lr']:g}" if s.get("lr") is not None else "starting"
            if s.get("phase") == "extending":
                lr += " (the chosen one, extended)"
            elif s.get("n", 1) > 1:
                lr += f" (candidate {s['i'] + 1} of {s['n']})"
            what = f"{lr}, step {s.get('step', 0):,} of {s.get('cap', 0):,}"
            if s.get("val") is not None:
                what += f", val {s['val']:.3f}"
        return head + what + "; " + self.eta_text()

    def eta(self) -> tuple[float | None, bool]:
        """(seconds the batch has left, or None before a rate is known; whether an
        extension may follow)."""
        active = self.active()
        queued = [r for r in self.runs if not r.finished and r.status is None]
        more = any(r.status.get("more") for r in active) or any(r.more for r in queued)
        rates = self.rates + [r.status["rate"] for r in active if r.status.get("rate")]
        mean = sum(rates) / len(rates) if rates else None
        lanes = []
        for r in active:
            rate = r.status.get("rate") or mean
            if not rate:
                return None, more
            lanes.append(r.status["left"] / rate)
        if queued and not mean:
            return None, more
        lanes += [0.0] * max(self.parallel - len(lanes), 0)
        for r in queued:  # each on the first slot to come free
            j = min(range(len(lanes)), key=lanes.__getitem__)
            lanes[j] += r.steps / mean
        return (max(lanes) if lanes else 0.0), more

    def eta_text(self) -> str:
        left, more = self.eta()
        if left is None:
            return "ETA after the first steps"
        span = f"{left:.0f} s" if left < 60 else f"{left / 60:.1f} min"
        return f"{'at least' if more else 'about'} {span} left in this batch"
