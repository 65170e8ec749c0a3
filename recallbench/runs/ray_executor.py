"""The ``ray`` executor: a sweep's points as Ray tasks."""
from __future__ import annotations

import os
from typing import Any, Iterator

from recallbench.api.errors import ConfigError, UnavailableError
from recallbench.runs.worker import THREAD_ENV, reason, run_configs, set_threads


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
                               f"({reason(exc)}); start the cluster (ray start --head) or "
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
                                           f"reached there ({reason(exc)})") from None
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
                        yield i, RuntimeError(f"ray task failed: {reason(exc)}")
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
