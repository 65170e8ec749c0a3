"""The one loop that runs many points and records them: :func:`drive`.

A sweep, an adaptive search's rounds and a leaderboard suite all run this way::

    tally = drive(items, executor, store, on_record=show)

``items`` are work items, each a list of jobs (anything with ``cfg``, a
:class:`~recallbench.api.config.RunConfig`, and ``config``, its dict: a sweep's
:class:`~recallbench.runs.sweep.Point`, or a :class:`Job`): one point, or the members of one
batched ensemble.  The executor (:mod:`recallbench.runs.executors`) runs them; an item whose
worker died gets one failed record per job, with a one-line reason.  Each record is
appended to the store as it arrives (so an interrupted run keeps every point that
finished), counted in the :class:`Tally`, and passed to ``on_record(job, record, tally)``,
where the caller prints its progress line.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Sequence

from recallbench.api.config import RunConfig
from recallbench.api.errors import reason


@dataclasses.dataclass
class Job:
    """A config to run, with whatever the caller needs to describe it (``tag``)."""

    cfg: RunConfig
    tag: Any = None

    def __post_init__(self):
        self.config: dict[str, Any] = self.cfg.to_dict()


@dataclasses.dataclass
class Tally:
    """Records seen so far: how many, ok or failed, and the time since ``start``."""

    ran: int = 0
    ok: int = 0
    failed: int = 0
    start: float = dataclasses.field(default_factory=time.perf_counter)
    lap: float = 0.0  # seconds between the last record and the one before (or the start)

    def __post_init__(self):
        self._last = self.start

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def count(self, record: dict) -> None:
        now = time.perf_counter()
        self.lap, self._last = now - self._last, now
        self.ran += 1
        if record.get("status") == "ok":
            self.ok += 1
        else:
            self.failed += 1


def drive(items: Sequence[Sequence[Any]], executor, store,
          on_record: Callable[[Any, dict, Tally], None] | None = None,
          tally: Tally | None = None, gate=None) -> Tally:
    """Run ``items`` through ``executor``, appending every record to ``store`` as it comes.

    ``tally`` carries counts over several calls (an adaptive search calls once a round).
    ``gate``: a :class:`recallbench.runs.budget.Gate` that the executor asks before it
    starts each item (a time budget); the items it refuses are not run.
    Exceptions of the executor itself (Ctrl-C, a ``reraise`` type) propagate; the records
    appended until then stay in the store.  A record the store cannot take (a full disk)
    stops the loop with :class:`~recallbench.runs.store.StoreWriteError`, after it and the
    rest of its item are saved aside (the error says where, and how to merge them back).
    """
    from recallbench.api.record import failed_record
    from recallbench.runs.store import StoreWriteError

    tally = tally if tally is not None else Tally()
    configs = [[job.config for job in item] for item in items]
    results = executor.run(configs) if gate is None else executor.run(configs, gate=gate)
    try:
        for i, result in results:
            item = items[i]
            if isinstance(result, BaseException):
                result = [failed_record(job.cfg, f"worker failed: {reason(result)}")
                          for job in item]
            pairs = list(zip(item, result))
            for k, (job, record) in enumerate(pairs):
                try:
                    store.append(record)
                except StoreWriteError as exc:  # the rest of the item goes where it went
                    exc.set_aside([rec for _, rec in pairs[k + 1:]])
                    raise
                tally.count(record)
                if on_record is not None:
                    on_record(job, record, tally)
    finally:
        close = getattr(results, "close", None)
        if close is not None:  # left early: the executor stops the work in flight now
            close()
    return tally
