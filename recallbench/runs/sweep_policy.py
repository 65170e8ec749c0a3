"""What a sweep decides about its points before it runs them, whatever its command line.

* :func:`check_stale`: results the store holds for these configs but made by other adapter
  source than the installed one are kept, not rerun, with one warning line per config
  (bounded); with ``refuse`` they stop the sweep before anything runs;
* :func:`check_available`: an adapter this machine cannot run stops the sweep before any
  work (not for Ray, whose workers may run where the driver cannot);
* :func:`shared_gpu`: the GPU the workers of ``--executor processes`` share, if any;
* :func:`store_state`: what the store holds of the points, and the points a run would
  still start (ok ones are done; failed ones are retried unless told not to).

:mod:`recallbench.cli.sweep` parses the command line and prints; the decisions are here.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable

from recallbench.api.errors import ConfigError
from recallbench.runs.store import StoreContents, stale_points

#: stale configs named one per line; the rest are counted in one more line
MAX_STALE_LINES = 10


def check_stale(points: Iterable, contents: StoreContents, refuse: bool,
                say: Callable[[str], None], max_lines: int = MAX_STALE_LINES,
                of: str = "this sweep") -> None:
    """Warn about (or, with ``refuse``, refuse) stored results of these points made by other
    adapter source: at most ``max_lines`` lines naming one config each, then a count,
    through ``say``.  They are kept, not rerun; ConfigError after the lines if refused.
    ``of``: what the points are, in that error (a capacity card's: "this card")."""
    stale = stale_points(points, contents)
    if not stale:
        return
    what = "refusing" if refuse else "warning"
    for p, rec in stale[:max_lines]:
        prov = rec["provenance"]
        say(f"recallbench: {what}: {p.hash[:12]} {p.label()}: stored result made by other "
            f"{p.adapter} source ({prov.get('distribution')} {prov.get('version')}, source "
            f"{str(prov['source_sha256'])[:12]})")
    if len(stale) > max_lines:
        say(f"recallbench: {what}: ... and {len(stale) - max_lines} more configs")
    if refuse:
        raise ConfigError(f"--refuse-stale: {len(stale)} stored results of {of} were made "
                          f"by other adapter source; use a new --store to rerun them")
    say(f"recallbench: {len(stale)} stored results made by other adapter source are kept, "
        f"not rerun (--refuse-stale stops instead; a new --store reruns them)")


def check_available(points: Iterable, executor: str) -> None:
    """Adapters that cannot run on this machine stop the sweep before any work.

    Skipped for Ray, whose workers may run where the driver cannot (a GPU cluster).
    """
    if executor == "ray":
        return
    from recallbench.api.registry import ADAPTERS

    for name in sorted({p.adapter for p in points}):
        ADAPTERS.require(name)


def shared_gpu(executor: str, points: list, ensemble: int | None, workers_per_gpu: int | None):
    """The GPU the workers of ``--executor processes`` share, or None (the CPUs bound them)."""
    if executor != "processes":
        return None
    from recallbench.runs.gpu_share import check_per_gpu, sweep_gpu

    check_per_gpu(workers_per_gpu)
    return sweep_gpu(points, ensemble, workers_per_gpu)


def store_state(points: list, contents: StoreContents | None, retry_failed: bool
                ) -> tuple[dict[str, str], Counter, list]:
    """(status by config hash, count of the points by status, the points left to run) of
    ``points`` against a store's contents (None: no store, every point pending).  A point
    is left unless its result is ok, or failed and ``retry_failed`` is false."""
    state = {} if contents is None else {h: r.get("status") for h, r in contents.by_hash.items()}
    counts = Counter(state.get(p.hash, "pending") for p in points)
    left = [p for p in points if state.get(p.hash) != "ok"
            and (retry_failed or state.get(p.hash) != "failed")]
    return state, counts, left
