"""Worker processes sharing one GPU: whether a sweep's runs use one, how many workers, and
whether they fit in its memory.

A run of a small model leaves a GPU nearly idle (on an H200 a 36k-parameter mamba2 took
61 ms a step, almost all of it kernel launches and Python), so ``--executor processes``
runs several workers on the same device when the sweep's runs train on a GPU
(``train.device`` cuda or cuda:N, or auto on a machine with CUDA):

* ``--workers`` is bounded by ``--workers-per-gpu`` (default :data:`DEFAULT_PER_GPU`, at
  most :data:`MAX_PER_GPU`) instead of the CPU count; without ``--workers`` the sweep
  takes the smallest of that, the CPUs and what fits in memory;
* the workers must fit in the GPU's free memory together: each holds a CUDA context
  (:data:`CONTEXT_BYTES`, an allowance, not measured here) and its largest work item (the
  run's device memory by :func:`recallbench.harness.resources.estimate`, K members' for
  an ensemble by :mod:`recallbench.harness.ensemble.memory`); more is refused in one line
  that says how many fit;
* the driver creates no CUDA context: the free memory is read by a short-lived spawned
  process (:func:`probe_free`), and each worker, started by spawn, makes its own and
  keeps to one torch thread.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
from typing import Callable, Iterable

from recallbench.api.errors import ConfigError, UnavailableError, reason

#: workers on one GPU unless --workers-per-gpu says otherwise
DEFAULT_PER_GPU = 16
#: the most --workers-per-gpu allows (Koren et al. ran up to 48 processes per GPU)
MAX_PER_GPU = 64
#: GPU memory allowed for each worker's CUDA context and torch's kernels (an allowance:
#: a context takes a few hundred MB, more with eagerly loaded kernels)
CONTEXT_BYTES = 768 << 20


@dataclasses.dataclass
class GpuRuns:
    """Runs that train on one GPU: its name, the device memory of the largest work item,
    the --workers-per-gpu bound (None: the default) and how free memory is read."""

    device: str
    item_bytes: int
    per_gpu: int | None = None
    probe: Callable[[str], int] = dataclasses.field(default=None, repr=False)

    def workers(self, workers: int | None, cpus: int) -> int:
        return gpu_workers(self.device, workers, self.per_gpu, cpus, self.item_bytes,
                           self.probe or probe_free)


def sweep_gpu(points: list, ensemble: int | None, per_gpu: int | None = None) -> GpuRuns | None:
    """The GPU a sweep's ``points`` train on and their largest work item (an ensemble's
    up to ``ensemble`` members), or None when they train on the CPU.

    One config is resolved per distinct cell (the axes less those that do not change the
    memory: the seed, and with ``ensemble`` every per-member key), not one per point.
    """
    from recallbench.harness.ensemble.memory import ensemble_bytes

    member = {"train.seed"}
    if ensemble:  # the driver loads the ensemble module anyway (its shape_key)
        from recallbench.harness.ensemble.shape import MEMBER_KEYS

        member = {f"train.{k}" for k in MEMBER_KEYS}
    cells: dict[str, list] = {}
    for p in points:
        key = repr([(k, repr(v)) for k, v in p.axes.items() if k not in member])
        cells.setdefault(key, [p, 0])[1] += 1
    cfgs = [(p.cfg, n) for p, n in cells.values()]
    device = uses_gpu(c.train.device for c, _ in cfgs)
    if device is None:
        return None
    most = max((ensemble_bytes(c, _members(c, n, ensemble), on_device=True) for c, n in cfgs),
               default=0)
    return GpuRuns(device, most, check_per_gpu(per_gpu))


def _members(cfg, points: int, ensemble: int | None) -> int:
    """Members of the largest work item of a cell of ``points`` points: one (a search trains
    its learning rates one by one), or up to ``ensemble`` points, each with its lrs."""
    if not ensemble:
        return 1
    return min(ensemble, points) * (len(cfg.train.lr) if isinstance(cfg.train.lr, list) else 1)


def uses_gpu(devices: Iterable[str]) -> str | None:
    """The CUDA device the runs train on (``cuda``, ``cuda:N``), or None for the CPU.

    ``auto`` means a GPU when this machine has one; ``torch.cuda.is_available`` counts the
    devices without creating a context.  UnavailableError when a run asks for CUDA and
    there is none.
    """
    devices = sorted(set(devices))
    cuda = [d for d in devices if d.startswith("cuda")]
    if len(cuda) > 1:
        raise ConfigError(f"train.device: the runs name {len(cuda)} GPUs ({', '.join(cuda[:4])}); "
                          "--executor processes shares one: run one sweep per GPU")
    if not cuda and "auto" not in devices:
        return None
    import torch

    if not torch.cuda.is_available():
        if cuda:
            raise UnavailableError(f"train.device = {cuda[0]}, but no CUDA device is "
                                   "available here")
        return None
    return cuda[0] if cuda else "cuda"


def free_here(device: str) -> int:
    """Free bytes of ``device``, asked in this process (which then holds a CUDA context)."""
    import torch

    return int(torch.cuda.mem_get_info(torch.device(device))[0])


def probe_free(device: str) -> int:
    """Free bytes of ``device``, asked by a spawned process, so this one creates no context."""
    import concurrent.futures as cf

    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(free_here, device).result()


def check_per_gpu(per_gpu: int | None) -> int:
    if per_gpu is None:
        return DEFAULT_PER_GPU
    if not 1 <= per_gpu <= MAX_PER_GPU:
        raise ConfigError(f"--workers-per-gpu {per_gpu} is not allowed: must be in "
                          f"[1, {MAX_PER_GPU}]")
    return per_gpu


def gpu_workers(device: str, workers: int | None, per_gpu: int | None, cpus: int,
                item_bytes: int, probe: Callable[[str], int] = probe_free) -> int:
    """The worker count for runs sharing ``device``: ``workers`` checked against the bound
    and the memory, or (None) the most that fit, at most the bound and ``cpus``."""
    from recallbench.harness.resources import human

    bound = check_per_gpu(per_gpu)
    if workers is not None and workers > bound:
        raise ConfigError(f"--workers {workers} is not allowed: must be in [1, {bound}] on "
                          f"{device} (--workers-per-gpu, at most {MAX_PER_GPU})")
    each = CONTEXT_BYTES + item_bytes
    try:
        free = probe(device)
    except Exception as exc:  # noqa: BLE001 - a driver error, a CPU-only torch, ...
        raise UnavailableError(f"{device}: cannot read its free memory ({reason(exc, 200)})") \
            from None
    fit = free // each
    if fit < 1:
        raise ConfigError(f"{device} has {human(free)} free: one worker needs ~{human(each)} "
                          f"(a CUDA context ~{human(CONTEXT_BYTES)} and its largest run "
                          f"~{human(item_bytes)})")
    if workers is None:
        return int(min(bound, cpus, fit))
    if workers > fit:
        raise ConfigError(f"--workers {workers} is not allowed on {device}: {workers} workers "
                          f"need ~{human(workers * each)} (each ~{human(each)}: a CUDA context "
                          f"and its largest run), {human(free)} is free; use --workers {fit} "
                          f"or fewer")
    return workers
