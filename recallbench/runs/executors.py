"""Where a sweep's points run, and the driver that writes their results.

Three executors share one interface, ``run(items) -> iterator of (index, result)``, yielding
each work item as it completes (``result`` is the list of its records, or the exception
that killed its worker).  A work item is a list of configs: one point, or with
``--ensemble K`` up to K points of the same ``shape_key`` trained as one batched model.

* ``inprocess`` (default): one point after another in this process.
* ``processes``: ``--workers K`` local worker processes (``ProcessPoolExecutor``, spawn
  context), each with ``--threads-per-worker`` torch threads (default 1).
* ``ray``: tasks on an existing cluster (``--address``) or on a local one started with
  ``ray.init(num_cpus=workers · threads)``; each task asks for ``threads`` CPUs.

An executor's workers (the process pool, the local Ray instance) start on the first
``run`` and are kept for the next one (an adaptive search calls it once a round) until
``close()``.  Only the driver (:func:`run_sweep`) writes the store, one record as each
item finishes.
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import sys
import time
from typing import Any, Callable, Iterator

from recallbench.api.errors import ConfigError, UnavailableError

EXECUTORS = ("inprocess", "processes", "ray")
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


# -- what runs in a worker ---------------------------------------------------------------

def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line[:500]


def set_threads(threads: int | None) -> None:
    """Torch threads of this process (workers call it once at start)."""
    if not threads:
        return
    for var in THREAD_ENV:
        os.environ[var] = str(threads)
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # only allowed before any parallel work; harmless to skip
        pass


def run_configs(configs: list[dict], threads: int | None = None, ensemble: bool = False
                ) -> list[dict]:
    """Run one work item; never raises for a failing point: it returns a failed record.

    ``configs`` are canonical config dicts (``RunConfig.to_dict()``), resolved here again.
    """
    from recallbench.api.config import resolve
    from recallbench.api.record import failed_record

    cfgs = []
    for raw in configs:
        cfg = resolve(raw)
        cfg.train.progress = False
        if threads:
            cfg.train.threads = threads  # not hashed: the point keeps its config_hash
        cfgs.append(cfg)
    if ensemble:
        from recallbench.harness.ensemble import run_ensemble

        try:
            records = run_ensemble(cfgs, progress=False)
            if len(records) != len(cfgs):
                raise RuntimeError(f"run_ensemble returned {len(records)} records "
                                   f"for {len(cfgs)} configs")
            return list(records)
        except Exception as exc:  # the whole batch failed: every member is recorded failed
            return [failed_record(cfg, f"ensemble of {len(cfgs)}: {_reason(exc)}") for cfg in cfgs]
    from recallbench.harness.train import run

    records = []
    for cfg in cfgs:
        try:
            records.append(run(cfg, progress=False))
        except Exception as exc:  # DivergedError, UnavailableError, a plugin's bug, ...
            records.append(failed_record(cfg, _reason(exc)))
    return records


# -- executors ---------------------------------------------------------------------------

class InProcess:
    name = "inprocess"

    def __init__(self, threads: int | None = None, ensemble: bool = False):
        self.threads, self.ensemble = threads, ensemble
        self.parallel = 1

    def run(self, items: list[list[dict]]) -> Iterator[tuple[int, Any]]:
        for i, item in enumerate(items):
            yield i, run_configs(item, self.threads, self.ensemble)

    def close(self) -> None:
        pass


class Processes:
    name = "processes"

    def __init__(self, workers: int, threads: int = 1, ensemble: bool = False):
        import multiprocessing

        self.workers, self.threads, self.ensemble = workers, threads, ensemble
        self.parallel = workers
        self._context = multiprocessing.get_context("spawn")
        self._pool: cf.ProcessPoolExecutor | None = None

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=self._context,
                                      initializer=set_threads, initargs=(self.threads,))

    def run(self, items: list[list[dict]]) -> Iterator[tuple[int, Any]]:
        from concurrent.futures.process import BrokenProcessPool

        if not items:
            return
        todo = list(range(len(items)))[::-1]
        window = 2 * self.workers  # enough queued that no worker waits for the driver
        pending: dict[cf.Future, int] = {}
        crashes: dict[int, int] = {}  # item → pool crashes it was in flight for
        if self._pool is None:  # kept between calls: an adaptive search calls once a round
            self._pool = self._new_pool()
        try:
            while todo or pending:
                while todo and len(pending) < window:
                    i = todo.pop()
                    pending[self._pool.submit(run_configs, items[i], self.threads,
                                              self.ensemble)] = i
                done, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                broken = None
                for fut in done:
                    i = pending.pop(fut)
                    try:
                        yield i, fut.result()
                    except BrokenProcessPool as exc:
                        broken = exc
                        pending[fut] = i  # handled with the rest of the pool below
                    except Exception as exc:  # e.g. a record that cannot be pickled back
                        yield i, exc
                if broken is not None:
                    # A worker died (killed, out of memory, a crash in native code): every
                    # item in flight is lost with the pool and we cannot tell which one
                    # killed it.  Each gets one more try in a fresh pool, then is failed.
                    lost = sorted(pending.values())
                    pending.clear()
                    self._pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = self._new_pool()
                    for i in lost:
                        crashes[i] = crashes.get(i, 0) + 1
                        if crashes[i] > 1:
                            yield i, RuntimeError(f"worker process died twice while running "
                                                  f"this point ({broken})")
                        else:
                            todo.append(i)
        finally:
            if pending:  # left early (an error, Ctrl-C): drop the work still queued
                self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


#: seconds to wait for a TCP connection to ``--address`` before giving up
CONNECT_TIMEOUT_S = 10.0


def _check_reachable(address: str) -> None:
    """Fail in one line, within :data:`CONNECT_TIMEOUT_S`, when nothing listens at a
    ``host:port`` (or ``ray://host:port``) address; Ray itself can wait for minutes.
    Other forms (``auto``, ``local``) are left to Ray."""
    import socket

    hostport = address[len("ray://"):] if address.startswith("ray://") else address
    if ":" not in hostport or "://" in hostport:
        return
    host, port = hostport.rsplit(":", 1)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--address {address!r} is not allowed: need host:port with a port "
                          f"in [1, 65535] (or auto)")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)),
                                 timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise UnavailableError(f"--address {address!r}: nothing answers there "
                               f"({_reason(exc)}); start the cluster (ray start --head) or "
                               f"leave out --address to run on a local one") from None


class Ray:
    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None, threads: int = 1,
                 ensemble: bool = False):
        try:
            import ray
        except ImportError as exc:
            raise UnavailableError(f"--executor ray needs the ray package "
                                   f"(pip install 'recallbench[ray]'): {exc}") from None
        self.ray, self.threads, self.ensemble = ray, threads, ensemble
        self._started = False
        env = {"env_vars": {var: str(threads) for var in THREAD_ENV}}
        if not ray.is_initialized():
            import logging

            kwargs: dict[str, Any] = dict(runtime_env=env, log_to_driver=False,
                                          logging_level=logging.WARNING)
            if address:
                _check_reachable(address)
                try:
                    ray.init(address=address, **kwargs)
                except (ConnectionError, TimeoutError, ValueError, RuntimeError) as exc:
                    raise UnavailableError(f"--address {address!r}: no Ray cluster could be "
                                           f"reached there ({_reason(exc)})") from None
            else:
                cpus = (workers or os.cpu_count() or 1) * threads
                ray.init(num_cpus=cpus, include_dashboard=False, **kwargs)
            self._started = True
        total = ray.cluster_resources().get("CPU", 1)
        self.parallel = max(1, int(total // threads))
        self._remote = ray.remote(num_cpus=threads, max_retries=0)(_ray_task)

    def run(self, items: list[list[dict]]) -> Iterator[tuple[int, Any]]:
        ray = self.ray
        refs = {self._remote.remote(item, self.threads, self.ensemble): i
                for i, item in enumerate(items)}
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                for ref in ready:
                    i = refs.pop(ref)
                    try:
                        yield i, ray.get(ref)
                    except Exception as exc:  # worker died, task error, ...
                        yield i, RuntimeError(f"ray task failed: {_reason(exc)}")
        finally:  # the cluster stays up for the next call until close()
            for ref in refs:
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()
            self._started = False


def _ray_task(configs: list[dict], threads: int, ensemble: bool) -> list[dict]:
    set_threads(threads)
    return run_configs(configs, threads, ensemble)


def make_executor(kind: str = "inprocess", *, workers: int | None = None, address: str | None = None,
                  threads: int | None = None, ensemble: bool = False):
    if kind not in EXECUTORS:
        raise ConfigError(f"--executor {kind!r} is not allowed: one of {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers} is not allowed: must be >= 1")
    if threads is not None and threads < 1:
        raise ConfigError(f"--threads-per-worker {threads} is not allowed: must be >= 1")
    if kind == "inprocess":
        return InProcess(threads, ensemble)
    if kind == "processes":
        return Processes(workers or os.cpu_count() or 1, threads or 1, ensemble)
    return Ray(address, workers, threads or 1, ensemble)


# -- the driver ----------------------------------------------------------------------------

def load_ensemble():
    """The ensemble module (run_ensemble, shape_key); UnavailableError if it is missing."""
    import importlib

    try:
        mod = importlib.import_module("recallbench.harness.ensemble")
    except ModuleNotFoundError as exc:
        if exc.name not in ("recallbench.harness.ensemble",):
            raise UnavailableError(f"--ensemble: recallbench.harness.ensemble cannot load: {exc}") from None
        raise UnavailableError("--ensemble needs recallbench.harness.ensemble (run_ensemble, shape_key), "
                               "which this installation does not have") from None
    for attr in ("run_ensemble", "shape_key"):
        if not callable(getattr(mod, attr, None)):
            raise UnavailableError(f"--ensemble: recallbench.harness.ensemble has no {attr}()")
    return mod


def batch_points(points: list, size: int | None, shape_key: Callable | None = None) -> list[list]:
    """Work items: one point each, or up to ``size`` points of equal shape_key per item."""
    if not size or shape_key is None:
        return [[p] for p in points]
    groups: dict[str, list] = {}
    for p in points:
        groups.setdefault(str(shape_key(p.cfg)), []).append(p)
    return [members[i:i + size] for members in groups.values()
            for i in range(0, len(members), size)]


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def run_sweep(points: list, store, executor, *, retry_failed: bool = True, limit: int | None = None,
              ensemble: int | None = None, echo: Callable[[str], None] = print,
              header: str | None = None) -> dict[str, int]:
    """Run the points of a (shard of a) sweep that the store does not have yet.

    Returns counts: total, done_before, failed_before, to_run, ran, ok, failed.
    """
    from recallbench.api.record import failed_record

    contents = store.read()
    ok_before, failed_before = contents.hashes("ok"), contents.hashes("failed")
    done_before = [p for p in points if p.hash in ok_before]
    if retry_failed:
        pending = [p for p in points if p.hash not in ok_before]
    else:
        pending = [p for p in points if p.hash not in ok_before and p.hash not in failed_before]
    kept_failed = len(points) - len(done_before) - len(pending)
    retrying = sum(1 for p in pending if p.hash in failed_before)
    if limit is not None:
        pending = pending[:limit]
    shape_key = load_ensemble().shape_key if ensemble else None
    items = batch_points(pending, ensemble, shape_key)
    total = len(points)
    notes = [f"{len(done_before)} done"]
    if retrying:
        notes.append(f"{retrying} failed before (retrying)")
    if kept_failed:
        notes.append(f"{kept_failed} failed before (kept, --no-retry-failed)")
    if header is None:
        header = f"{total} points; "
    echo(f"{header}store {store.path}: {', '.join(notes)}; "
         f"{len(pending)} to run"
         + (f" (--limit {limit})" if limit is not None else "")
         + f" [{executor.name}" + (f" x{executor.parallel}" if executor.parallel > 1 else "")
         + (f", ensembles of <= {ensemble}: {len(items)} batches" if ensemble else "") + "]")
    counts = {"total": total, "done_before": len(done_before), "failed_before": len(failed_before),
              "to_run": len(pending), "ran": 0, "ok": 0, "failed": 0}
    if not pending:
        return counts
    done = len(done_before) + kept_failed
    width = len(str(total))
    start = time.perf_counter()
    try:
        for i, result in executor.run([[p.config for p in item] for item in items]):
            item = items[i]
            if isinstance(result, BaseException):
                result = [failed_record(p.cfg, f"worker failed: {_reason(result)}") for p in item]
            for point, record in zip(item, result):
                if record.get("config_hash") != point.hash:
                    echo(f"warning: record for {point.label()} has config_hash "
                         f"{str(record.get('config_hash'))[:12]}, expected {point.hash[:12]}")
                store.append(record)
                done += 1
                counts["ran"] += 1
                ok = record.get("status") == "ok"
                counts["ok" if ok else "failed"] += 1
                elapsed = time.perf_counter() - start
                left = len(pending) - counts["ran"]
                eta = _clock(elapsed / counts["ran"] * left) if left else "0:00:00"
                if ok:
                    acc = record.get("accuracy")
                    what = (f"ok     acc {acc:.4f} " if isinstance(acc, (int, float)) else "ok     ") \
                        + f"{record.get('wall_s', 0) or 0:6.1f}s"
                else:
                    what = f"FAILED {record.get('error')}"
                echo(f"[{done:>{width}}/{total}] {what}  {point.label()}  "
                     f"| failed {counts['failed']} | ETA {eta}")
    finally:
        executor.close()
    echo(f"finished {counts['ran']} points in {_clock(time.perf_counter() - start)}: "
         f"{counts['ok']} ok, {counts['failed']} failed"
         + (" (failed points are retried on the next run)" if counts["failed"] else ""))
    sys.stdout.flush()
    return counts
