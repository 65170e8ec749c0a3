"""One run: train (or only evaluate) one model on one task and return its result record.

    record = run({"task": {...}, "model": {...}, "train": {...}})

The record is plain JSON (schema ``recallbench.result/1``, see
:func:`recallbench.api.record.make_record`): accuracy with its counts, state size,
parameters, steps, wall time, whether the run converged, the resolved config and its hash.
A ``train.lr`` that is a list (or ``auto``) is a learning-rate search
(:mod:`recallbench.harness.lr_search`): every candidate is trained, the best by validation
accuracy is scored on the test set.  The run stops at ``early_stop``, on a plateau
(``train.patience``) or at ``max_steps`` (:mod:`recallbench.harness.convergence`).

Before anything is allocated, the run's memory is estimated and a run that would not
fit is refused (:func:`recallbench.harness.resources.check_memory`, a ConfigError).  A
run whose loss becomes NaN or infinite raises :class:`recallbench.harness.module.DivergedError`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

import torch

from recallbench.api.config import RunConfig, resolve
from recallbench.harness.data import MODEL_STREAM, RecallDataModule, make_generator
from recallbench.api.errors import UnavailableError
from recallbench.harness.loop import asked
from recallbench.harness.metrics import RecallAccuracy
from recallbench.harness.model import RecallModel
from recallbench.harness.resources import check_memory
from recallbench.api.registry import ADAPTERS
from recallbench.api.kernels import preflight
from recallbench.api.record import make_record

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


@torch.no_grad()
def score(model: torch.nn.Module, data: tuple[torch.Tensor, torch.Tensor], top_k: int,
          device: torch.device, batch_size: int = 512) -> dict[str, Any]:
    """Recall counts of ``model`` on a fixed set."""
    metric = RecallAccuracy(top_k=top_k)
    model.eval()
    inputs, targets = data
    for i in range(0, len(inputs), batch_size):
        logits, answers = asked(model, inputs[i:i + batch_size].to(device),
                                targets[i:i + batch_size].to(device))
        metric.update(logits.float().cpu(), answers.cpu())
    return {k: (v.item()) for k, v in metric.compute().items()}


def run(config: RunConfig | Mapping[str, Any] | None = None, progress: bool | None = None,
        weights: str | Path | None = None) -> dict[str, Any]:
    """Train and test one configuration; returns the result record (a dict).

    ``weights``: also save the tested model's ``state_dict`` there (``torch.save``), so that
    ``recallbench probe`` can read the trained model without retraining.  A learning-rate
    search then trains its candidates one by one (the batched ensemble keeps no model)."""
    cfg = config if isinstance(config, RunConfig) else resolve(config)
    adapter_cls = ADAPTERS.require(cfg.model.adapter)
    device = pick_device(cfg.train.device)
    preflight(adapter_cls, device)  # kernels that cannot run: one line now, not mid-training
    check_memory(cfg, str(device))
    threads = pick_threads(cfg) if device.type == "cpu" else torch.get_num_threads()
    show = cfg.train.progress if progress is None else progress
    start = time.perf_counter()
    with cpu_threads(threads), quiet_lightning():
        if isinstance(cfg.train.lr, list):
            from recallbench.harness.lr_search import run_search

            record = run_search(cfg, device, show, batched=False if weights else None,
                                weights=weights)
        else:
            record = run_one(cfg, device, show, weights)
    record["wall_s"] = round(time.perf_counter() - start, 3)
    record["threads"] = threads if device.type == "cpu" else None
    return record


def build_model(cfg: RunConfig, device: torch.device):
    """(adapter, model) of a run, seeded as every run is: the single place a model is made."""
    from lightning import seed_everything

    seed_everything(cfg.train.seed, workers=True, verbose=False)
    adapter = ADAPTERS.get(cfg.model.adapter)(cfg.model)
    model = RecallModel(adapter, cfg.task.vocab_size, device=device,
                        generator=make_generator(MODEL_STREAM, cfg.train.seed)).to(device)
    return adapter, model


def _step_bar() -> list:
    """Lightning's rich progress bar, labelled "train" instead of "Epoch 0/-2".

    A run is one endless stream of fresh batches bounded by ``max_steps`` (Lightning's
    ``max_epochs`` is -1), so an epoch count means nothing; the bar's total is the steps.
    Without rich, Lightning's own tqdm bar ("Epoch 0") is used.
    """
    import importlib.util

    if importlib.util.find_spec("rich") is None:
        return []
    from lightning.pytorch.callbacks import RichProgressBar

    class StepBar(RichProgressBar):
        def _get_train_description(self, current_epoch: int) -> str:
            return f"{'train':{len(self.validation_description)}}"

    return [StepBar()]


@contextlib.contextmanager
def _ctrl_c_kept(trainer):
    """Lightning's ``fit``/``validate`` inside, with Ctrl-C kept a KeyboardInterrupt.

    Lightning answers Ctrl-C by ignoring SIGINT from then on and calling ``sys.exit(1)``:
    a sweep would die without a word, with exit status 1, and a pytest session that
    called :func:`run` could no longer be interrupted at all.  Here the SIGINT handler is
    put back and the interrupt re-raised, so callers (the CLI: "interrupted", exit 130)
    see it as one.
    """
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGINT) if main else None
    try:
        yield
    except SystemExit:
        if not trainer.interrupted:
            raise
        if handler is not None:
            signal.signal(signal.SIGINT, handler)
        raise KeyboardInterrupt from None


@dataclasses.dataclass
class Trained:
    """A trained model (best-validation weights restored), not yet scored on the test set."""

    cfg: RunConfig
    adapter: Any
    model: RecallModel
    module: Any  # its RecallModule: best validation accuracy, step and History
    test_set: tuple[torch.Tensor, torch.Tensor]
    steps: int
    train_s: float

    @property
    def val_accuracy(self) -> float | None:
        return self.module.best_val if self.module.best_state is not None else None

    def convergence(self) -> dict[str, Any]:
        return self.module.history.summary(self.adapter.trainable)

    def save_weights(self, path: str | Path) -> None:
        """The model's ``state_dict`` to ``path``, written whole or not at all."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.partial")
        torch.save({k: v.detach().cpu() for k, v in self.model.state_dict().items()}, tmp)
        os.replace(tmp, path)

    def record(self, device: torch.device) -> dict[str, Any]:
        """Score the model on the test set: its record (without ``wall_s``, ``threads``)."""
        self.model.to(device)
        test = score(self.model, self.test_set, self.cfg.train.top_k, device)
        return make_record(self.cfg, self.adapter, self.model, test, steps=self.steps,
                           train_s=self.train_s, val_accuracy=self.val_accuracy,
                           best_step=self.module.best_step, device=device,
                           convergence=self.convergence())


def run_one(cfg: RunConfig, device: torch.device, show: bool,
            weights: str | Path | None = None) -> dict[str, Any]:
    """Train one learning rate and test: the record without ``wall_s`` and ``threads``."""
    trained = train_one(cfg, device, show)
    if weights is not None:
        trained.save_weights(weights)
    return trained.record(device)


def train_one(cfg: RunConfig, device: torch.device, show: bool) -> Trained:
    """Train one learning rate; the best-validation weights are restored, the test set
    is not touched."""
    from lightning import Trainer

    from recallbench.harness.module import RecallModule

    tc = cfg.train
    adapter, model = build_model(cfg, device)
    dm = RecallDataModule(cfg.task, tc.batch_size, tc.seed, tc.val_size, tc.test_size)
    dm.setup()
    module = RecallModule(model, tc)
    train_s = 0.0
    steps = 0
    if adapter.trainable and tc.max_steps > 0:
        callbacks = _step_bar() if show else []  # the module's History stops the run
        trainer = Trainer(
            accelerator="gpu" if device.type == "cuda" else "cpu",
            devices=[device.index or 0] if device.type == "cuda" else 1,
            max_steps=tc.max_steps, val_check_interval=min(tc.val_every, tc.max_steps),
            check_val_every_n_epoch=None, num_sanity_val_steps=0, logger=False,
            enable_checkpointing=False, enable_model_summary=False,
            enable_progress_bar=show, callbacks=callbacks,
            gradient_clip_val=tc.grad_clip, gradient_clip_algorithm="norm")
        t0 = time.perf_counter()
        with _ctrl_c_kept(trainer):
            trainer.fit(module, datamodule=dm)
            steps = trainer.global_step
            if module.last_val_step != steps:  # score the final weights too
                trainer.validate(module, datamodule=dm, verbose=False)
        train_s = time.perf_counter() - t0
        module.restore_best()
    return Trained(cfg, adapter, model, module, dm.test_set, steps, train_s)
