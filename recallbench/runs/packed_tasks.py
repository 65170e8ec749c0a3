"""What a packed worker runs (:mod:`recallbench.runs.packing`): one learning-rate candidate of
a run, the chosen candidate's extension and test, or a whole run, each under an optional
:class:`~recallbench.runs.budget.Limit`, after a warm-up per model shape.

A learning-rate search with ``train.max_steps_limit`` trains its candidates one after
another in one process (:func:`recallbench.harness.lr_search._sequential`).  Here the
same search is split into tasks that may run in different workers at once:

* :func:`candidate`: train candidate ``i`` for its first ``max_steps`` (the same
  :func:`~recallbench.harness.single.train_one` call, the same seed, so the same model);
  the worker keeps the trained model and its checkpoint in memory under ``key``;
* :func:`finish`: in the worker that holds the chosen candidate, extend it while it
  improves (:func:`~recallbench.harness.single.extend`), score it on the test set and build
  the search's record exactly as ``lr_search`` does (``tests/test_packing.py`` compares
  the two records field by field); :func:`drop` frees the candidates not chosen.

A record's ``cpu_s`` is the CPU time of its tasks (warm-ups excluded), ``wall_s`` is
filled in by the driver (first task's start to the record).  :func:`warm` trains one step
and one validation of a shape once per worker on a GPU, so that kernels compiled or
autotuned on first use (Triton) are not timed in the runs, which then reuse them.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any

from recallbench.api.errors import reason

_KEPT: dict[str, Any] = {}  # key -> Trained, the candidates this worker holds
_WARM: set[str] = set()  # the shapes this worker has warmed


def _setup(raw: dict, threads: int | None):
    """(cfg, device, threads) of a run's config, checked as ``train.run`` checks it."""
    import torch

    from recallbench.api.config import resolve
    from recallbench.api.kernels import preflight
    from recallbench.api.registry import ADAPTERS
    from recallbench.harness.prepare import pick_device, pick_threads
    from recallbench.harness.resources import check_memory

    cfg = resolve(raw)
    cfg.train.progress = False
    if threads:
        cfg.train.threads = threads  # not hashed: the run keeps its config_hash
    device = pick_device(cfg.train.device)
    preflight(ADAPTERS.require(cfg.model.adapter), device)
    check_memory(cfg, str(device))
    n = pick_threads(cfg) if device.type == "cpu" else torch.get_num_threads()
    return cfg, device, n


def _single(cfg, lr, limit):
    """``cfg`` with one ``lr`` and ``max_steps_limit`` ``limit``."""
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=lr,
                                                              max_steps_limit=limit))


def shape_of(cfg) -> str:
    """What a warm-up covers: the adapter, model sizes, device, L and batch."""
    m, t = cfg.model, cfg.train
    return (f"{m.adapter}|{m.d_model}|{m.d_state}|{m.n_layers}|{m.expand}|{cfg.task.length}|"
            f"{cfg.task.vocab_size}|{t.batch_size}|{t.device}")


def warm(cfg, device) -> float:
    """One training step and one validation of ``cfg``'s shape, once per worker on a GPU
    (on a CPU nothing is compiled on first use); seconds."""
    from recallbench.api.registry import ADAPTERS
    from recallbench.harness.single import train_one

    key = shape_of(cfg)
    if device.type != "cuda" or key in _WARM or not getattr(ADAPTERS.require(cfg.model.adapter), "trainable", True):
        return 0.0
    t0 = time.perf_counter()
    lr = cfg.train.lr[0] if isinstance(cfg.train.lr, list) else cfg.train.lr
    probe = _single(cfg, lr, None)
    probe = dataclasses.replace(probe, train=dataclasses.replace(
        probe.train, max_steps=1, val_every=1, early_stop=None))
    try:
        train_one(probe, device, False)
    except Exception:  # the run itself will fail with the reason
        pass
    _WARM.add(key)
    return time.perf_counter() - t0


def _run(body, limit, threads: int, device):
    """``body()`` under ``limit``, this run's threads and a quiet Lightning."""
    from recallbench.harness.heap import keep_freed_memory
    from recallbench.harness.prepare import cpu_threads, quiet_lightning
    from recallbench.runs.budget import deadline

    if device.type == "cpu":
        keep_freed_memory()
    with deadline(limit), cpu_threads(threads), quiet_lightning():
        return body()


def candidate(raw: dict, index: int, key: str, threads: int | None = None,
              limit=None) -> dict:
    """Train candidate ``index`` of ``raw``'s lr list (compared at ``max_steps``, kept under
    ``key`` with its checkpoint); ``{entry, train_s, cpu_s, warm_s}``."""
    from recallbench.harness.lr_candidates import entry
    from recallbench.harness.module import DivergedError
    from recallbench.harness.single import train_one

    cfg, device, n = _setup(raw, threads)
    lr = cfg.train.lr[index]
    limit_steps = cfg.train.max_steps_limit
    extending = limit_steps is not None and limit_steps > cfg.train.max_steps
    warm_s = _run(lambda: warm(cfg, device), None, n, device)
    cpu0 = time.process_time()

    def body():
        try:
            t = train_one(_single(cfg, lr, None), device, False, checkpoint=extending)
        except DivergedError as exc:
            return {"entry": entry(lr, None, 0, False, reason(exc)), "train_s": 0.0}
        _KEPT[key] = t
        return {"entry": entry(lr, t.val_accuracy, t.steps, t.convergence()["converged"]),
                "train_s": t.train_s}

    out = _run(body, limit, n, device)
    return {**out, "cpu_s": time.process_time() - cpu0, "warm_s": warm_s}


def finish(raw: dict, key: str, entries: list[dict], index: int, train_s: float,
           threads: int | None = None, limit=None) -> dict:
    """The search's record from its chosen candidate (``key``, entry ``index``), extended
    under ``max_steps_limit`` if it had not converged, as ``lr_search`` does."""
    from recallbench.harness.lr_candidates import entry, searched_record
    from recallbench.harness.module import DivergedError
    from recallbench.harness.single import extend

    cfg, device, n = _setup(raw, threads)
    best = _KEPT.pop(key)
    limit_steps = cfg.train.max_steps_limit
    entries = [dict(e) for e in entries]
    cpu0 = time.process_time()

    def body():
        nonlocal best, train_s
        if (limit_steps is not None and limit_steps > cfg.train.max_steps
                and not best.convergence()["converged"]):
            try:
                t = extend(best, limit_steps, device)
            except DivergedError:
                pass  # diverged past the cap: the capped run stands
            else:
                train_s += t.train_s - best.train_s
                entries[index] = entry(t.cfg.train.lr, t.val_accuracy, t.steps,
                                       t.convergence()["converged"])
                best = t
        return searched_record(best.record(device), cfg, entries, train_s)

    record = _run(body, limit, n, device)
    record["cpu_s"] = time.process_time() - cpu0
    record["threads"] = n if device.type == "cpu" else None
    return record


def whole(raw: dict, threads: int | None = None, limit=None) -> dict:
    """A whole run (``train.run``: one lr, or a search without a limit, batched where the
    layer vmaps), after the worker's warm-up of its shape; a failure is a failed record."""
    from recallbench.api.record import failed_record
    from recallbench.harness.train import run

    try:
        from recallbench.runs.budget import deadline

        cfg, device, n = _setup(raw, threads)
        _run(lambda: warm(cfg, device), None, n, device)
        with deadline(limit):
            return run(cfg, progress=False)
    except Exception as exc:  # DivergedError, UnavailableError, a plugin's bug, ...
        from recallbench.api.config import resolve

        return failed_record(resolve(raw), reason(exc))


def drop(keys: list[str]) -> int:
    """Forget the kept candidates ``keys``; how many this worker held."""
    return sum(_KEPT.pop(k, None) is not None for k in keys)


def held() -> list[str]:
    """The keys of the candidates this worker holds."""
    return sorted(_KEPT)
