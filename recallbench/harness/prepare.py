"""What a run prepares before it trains: its device, its CPU threads, a quiet Lightning, and
its seeded model (:func:`build_model`, the single place a model is made, for single runs,
learning-rate searches and batched ensembles alike)."""
from __future__ import annotations

import contextlib
import logging
import warnings

import torch

from recallbench.api.config import RunConfig
from recallbench.api.errors import ConfigError, UnavailableError
from recallbench.api.registry import ADAPTERS
from recallbench.harness.data import MODEL_STREAM, make_generator
from recallbench.harness.model import RecallModel

# Models with at most this many inner channels are "tiny": on CPU one thread beats
# several, because per-op dispatch dominates and threads only add synchronization
# (benchmarks/bench_train.py measures the ratio).
TINY_CHANNELS = 512


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UnavailableError("train.device = cuda, but no CUDA device is available here")
    return torch.device(name)


def pick_threads(cfg: RunConfig) -> int:
    """CPU threads for this run: the user's, else 1 for tiny models, else torch's default."""
    if cfg.train.threads is not None:
        return cfg.train.threads
    if cfg.model.expand * cfg.model.d_model <= TINY_CHANNELS:
        return 1
    return torch.get_num_threads()


@contextlib.contextmanager
def cpu_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def quiet_lightning():
    """Silence Lightning's start-up chatter (GPU/TPU availability, seed lines, tips)."""
    names = ["lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning",
             "lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.seed"]
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(does not have many workers|"
                                "IterableDataset|infinite|num_workers|LitLogger|litlogger|"
                                "LeafSpec).*")
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


def checked_state_size(adapter) -> int | None:
    """``adapter.state_size()``, which every record and card reads; ConfigError (one line
    naming the adapter) unless it is a positive integer or None (a state that grows with L)."""
    import numbers

    size = adapter.state_size()
    if size is None or (isinstance(size, numbers.Integral) and not isinstance(size, bool)
                        and size > 0):
        return None if size is None else int(size)
    raise ConfigError(f"adapter {getattr(adapter, 'name', type(adapter).__name__)}: "
                      f"state_size() = {str(size)[:40]} is not allowed: a positive integer "
                      "(the scalars of state per sequence) or None (a state that grows with L)")


def build_model(cfg: RunConfig, device: torch.device):
    """(adapter, model) of a run, seeded as every run is: the single place a model is made
    (an adapter whose state size is impossible is refused here, before any training)."""
    from lightning import seed_everything

    seed_everything(cfg.train.seed, workers=True, verbose=False)
    adapter = ADAPTERS.get(cfg.model.adapter)(cfg.model)
    checked_state_size(adapter)
    model = RecallModel(adapter, cfg.task.vocab_size, device=device,
                        generator=make_generator(MODEL_STREAM, cfg.train.seed)).to(device)
    return adapter, model
