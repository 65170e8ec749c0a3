"""One learning rate: train a model (best-validation weights restored), save its weights,
and score it on the test set.  :func:`recallbench.harness.train.run` calls it for a single
``train.lr``, and :mod:`recallbench.harness.lr_search` once per candidate."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import torch

from recallbench.api.config import RunConfig
from recallbench.api.recipes import fresh_validation
from recallbench.api.record import make_record
from recallbench.harness.convergence import guess_of
from recallbench.harness.data import FreshSets, RecallDataModule
from recallbench.harness.loop import asked
from recallbench.harness.metrics import RecallAccuracy
from recallbench.harness.model import RecallModel
from recallbench.harness.prepare import build_model

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
        return {**self.module.history.summary(self.adapter.trainable),
                **self.module.extension()}

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
    draw = FreshSets(cfg.task, tc.val_size, tc.seed) if fresh_validation(tc.recipe) else None
    module = RecallModule(model, tc, guess=guess_of(cfg.task), val_set=dm.val_set,
                          val_draw=draw)
    train_s = 0.0
    steps = 0
    if adapter.trainable and tc.max_steps > 0:
        callbacks = _step_bar() if show else []  # the module's History stops the run
        # the module validates itself (RecallModule.validate): Lightning's loop never does
        trainer = Trainer(
            accelerator="gpu" if device.type == "cuda" else "cpu",
            devices=[device.index or 0] if device.type == "cuda" else 1,
            max_steps=tc.max_steps if tc.max_steps_limit is None else tc.max_steps_limit,
            limit_val_batches=0, num_sanity_val_steps=0, logger=False,
            enable_checkpointing=False, enable_model_summary=False,
            enable_progress_bar=show, callbacks=callbacks,
            gradient_clip_val=tc.grad_clip, gradient_clip_algorithm="norm")
        t0 = time.perf_counter()
        with _ctrl_c_kept(trainer):
            trainer.fit(module, train_dataloaders=dm.train_dataloader())
            steps = trainer.global_step
            if module.last_val_step != steps:  # score the final weights too
                module.validate(steps)
        train_s = time.perf_counter() - t0
        module.restore_best()
    return Trained(cfg, adapter, model, module, dm.test_set, steps, train_s)
