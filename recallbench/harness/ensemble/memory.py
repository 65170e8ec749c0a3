"""What a batched ensemble of K members needs, and how many members fit at once.

Built on the single run's estimate (:func:`recallbench.harness.resources.estimate`): each
member holds its own parameters and optimizer state and its own training batch's
activations (the stacked step runs all K at once), while the validation and test sets are
shared and scoring splits its 512 sequences among the members
(:meth:`~recallbench.harness.ensemble.model.StackedModels.score`), so the sets and the
evaluation batch count once.  :func:`members_that_fit` is how
:func:`recallbench.harness.ensemble.run_ensemble` chunks an ensemble too big for the
device (K = 64 of a large cell) into consecutive smaller ones.
"""
from __future__ import annotations

from recallbench.harness.resources import Part, estimate, host_available, needed

#: parts of a single run that every member holds for itself
PER_MEMBER = ("the model's parameters and optimizer state", "one training batch")


def ensemble_parts(cfg, members: int) -> list[Part]:
    """The memory parts of an ensemble of ``members`` copies of ``cfg``'s shape."""
    return [p._replace(bytes=p.bytes * members) if p.name in PER_MEMBER else p
            for p in estimate(cfg)]


def ensemble_bytes(cfg, members: int, on_device: bool | None = None) -> int:
    """Bytes an ensemble of ``members`` needs (``on_device``: only the device's parts,
    or only the host's; None: all)."""
    parts = ensemble_parts(cfg, members)
    if on_device is not None:
        parts = [p for p in parts if p.on_device == on_device]
    return needed(parts)


def available(device) -> int:
    """Bytes free for the ensemble's device parts: the GPU's free memory, or the host's."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    return host_available()


def members_that_fit(cfg, members: int, free: int, on_device: bool | None = None) -> int:
    """The most members (at most ``members``, at least 1) whose ensemble fits in ``free``."""
    lo, hi = 1, members
    while lo < hi:  # needed() grows with the member count: bisect
        mid = (lo + hi + 1) // 2
        if ensemble_bytes(cfg, mid, on_device) <= free:
            lo = mid
        else:
            hi = mid - 1
    return lo

