"""One learning rate: train a model (best-validation weights restored), save its weights,
and score it on the test set.  :func:`recallbench.harness.train.run` calls it for a single
``train.lr``, and :mod:`recallbench.harness.lr_search` once per candidate.

A run trained with ``checkpoint=True`` and stopped at its cap keeps a :class:`Checkpoint`
in memory; :func:`extend` continues it under ``train.max_steps_limit`` as if it had had the
limit from the start (bit for bit: ``tests/test_extension.py``), so a search extends the
candidate it chose without training its first ``max_steps`` steps again.  A run trained
with ``pause_at`` stops after that step with its :class:`Checkpoint`, and :func:`go_on`
continues it as if it had never stopped (``tests/test_lr_halving.py``)."""
from __future__ import annotations

import contextlib
import copy
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
from recallbench.harness.data import FreshSets, RecallDataModule, TrainStream
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
class Checkpoint:
    """Where a run stood at its cap, in memory: its last weights (the model itself holds the
    best-validation ones), AdamW's and the scheduler's state, the training stream's position
    and torch's RNG state."""

    steps: int
    weights: dict[str, torch.Tensor]
    optimizer: dict
    scheduler: dict
    data: tuple[int, torch.Tensor]
    rng: dict[str, torch.Tensor]


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
    checkpoint: Checkpoint | None = None  # kept at the cap when asked for (``extend``)

    @property
    def paused(self) -> bool:
        """Stopped at its pause, before its cap, with its checkpoint (:func:`go_on`)."""
        return self.checkpoint is not None and self.module.paused(self.checkpoint.steps)

    @property
    def val_accuracy(self) -> float | None:
        return self.module.best_val if self.module.best_state is not None else None

    def convergence(self) -> dict[str, Any]:
        return {**self.module.summary(self.adapter.trainable), **self.module.extension()}

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
            weights: str | Path | None = None, report=None) -> dict[str, Any]:
    """Train one learning rate and test: the record without ``wall_s`` and ``threads``.
    ``report``: told of its start and steps (:mod:`recallbench.runs.progress`)."""
    if report is not None:
        report.candidate(0, 1, cfg.train.lr, cfg.train.max_steps, cfg.train.max_steps_limit)
    trained = train_one(cfg, device, show, report=report)
    if weights is not None:
        trained.save_weights(weights)
    return trained.record(device)


def _trainer(device: torch.device, show: bool, max_steps: int, grad_clip):
    from lightning import Trainer

    callbacks = _step_bar() if show else []  # the module's History stops the run
    # the module validates itself (RecallModule.validate): Lightning's loop never does
    return Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=[device.index or 0] if device.type == "cuda" else 1,
        max_steps=max_steps, limit_val_batches=0, num_sanity_val_steps=0, logger=False,
        enable_checkpointing=False, enable_model_summary=False,
        enable_progress_bar=show, callbacks=callbacks,
        gradient_clip_val=grad_clip, gradient_clip_algorithm="norm")


def _fit(trainer, module, loader, step_offset: int = 0) -> tuple[int, float]:
    """Train; (steps done in all, seconds).  The final weights are validated too."""
    t0 = time.perf_counter()
    with _ctrl_c_kept(trainer):
        trainer.fit(module, train_dataloaders=loader)
        steps = step_offset + trainer.global_step
        if module.last_val_step != steps:  # score the final weights too
            module.validate(steps)
    return steps, time.perf_counter() - t0


def _rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _kept(trainer, model, stream, steps: int, device: torch.device) -> Checkpoint:
    return Checkpoint(steps, copy.deepcopy(model.state_dict()),
                      copy.deepcopy(trainer.optimizers[0].state_dict()),
                      trainer.lr_scheduler_configs[0].scheduler.state_dict(),
                      stream.position(steps), _rng_state(device))


def train_one(cfg: RunConfig, device: torch.device, show: bool,
              checkpoint: bool = False, report=None, pause_at: int | None = None) -> Trained:
    """Train one learning rate; the best-validation weights are restored, the test set
    is not touched.  ``checkpoint``: keep the run's :class:`Checkpoint` if it stopped at
    its cap (for :func:`extend`).  ``report``: told of every step (the module's hook).
    ``pause_at``: stop after that step (on the validation grid, before the cap), keeping
    the checkpoint there (for :func:`go_on`), unless the run stopped of its own before."""
    from recallbench.harness.module import RecallModule

    tc = cfg.train
    adapter, model = build_model(cfg, device)
    dm = RecallDataModule(cfg.task, tc.batch_size, tc.seed, tc.val_size, tc.test_size)
    dm.setup()
    draw = FreshSets(cfg.task, tc.val_size, tc.seed) if fresh_validation(tc.recipe) else None
    module = RecallModule(model, tc, guess=guess_of(cfg.task), val_set=dm.val_set,
                          val_draw=draw, report=report)
    module.pause_at = pause_at
    train_s = 0.0
    steps = 0
    kept = None
    if adapter.trainable and tc.max_steps > 0:
        trainer = _trainer(device, show,
                           tc.max_steps if tc.max_steps_limit is None else tc.max_steps_limit,
                           tc.grad_clip)
        stream = TrainStream(cfg.task, tc.batch_size, tc.seed)
        loader = torch.utils.data.DataLoader(stream, batch_size=None)
        try:
            steps, train_s = _fit(trainer, module, loader)
        finally:
            module.report = None
        if module.paused(steps) or (checkpoint and steps == module.cap):
            kept = _kept(trainer, model, stream, steps, device)
        module.restore_best()
    return Trained(cfg, adapter, model, module, dm.test_set, steps, train_s, kept)


def extend(t: Trained, limit: int, device: torch.device, report=None) -> Trained:
    """Continue ``t``, stopped at its cap with its checkpoint, under ``max_steps_limit``
    ``limit``: the cap doubles while it improves, as if ``t`` had had the limit from the
    start.  Its module and model go on (``t`` is spent); the Trained returned has the
    limit's config, all its steps and all its training time.  When the run does not go on
    (converged, or the limit is not above the cap) it is ``t`` under the limit's config.
    DivergedError if it diverges past the cap; ``t`` is then as it was.  ``report``: told
    that it goes on, and of every step."""
    cfg = dataclasses.replace(t.cfg, train=dataclasses.replace(t.cfg.train,
                                                                max_steps_limit=limit))
    module, ck = t.module, t.checkpoint
    module.limit = limit
    if ck is None or not module.extends():
        return dataclasses.replace(t, cfg=cfg, checkpoint=None)
    before = {k: copy.copy(getattr(module, k)) for k in
              ("history", "best_val", "best_step", "best_state", "last_val_step", "cap",
               "extended", "step_offset", "train_cfg")}
    before["history"] = copy.deepcopy(module.history)
    t.model.load_state_dict(ck.weights)
    t.model.train()  # as it trained (scoring it left it in eval mode)
    module.resume(cfg.train, ck.steps, ck.optimizer, ck.scheduler)
    _set_rng_state(ck.rng, device)
    if report is not None:
        report.extending(cfg.train.lr, ck.steps, min(2 * ck.steps, limit))  # its next cap
    module.report = report
    tc = cfg.train
    loader = torch.utils.data.DataLoader(
        TrainStream(cfg.task, tc.batch_size, tc.seed, resume_from=ck.data), batch_size=None)
    try:
        steps, train_s = _fit(_trainer(device, False, limit - ck.steps, tc.grad_clip),
                              module, loader, ck.steps)
    except BaseException:
        for k, v in before.items():
            setattr(module, k, v)
        module.limit = t.cfg.train.max_steps_limit
        module.restore_best()
        raise
    finally:
        module.report = None
    module.restore_best()
    return Trained(cfg, t.adapter, t.model, module, t.test_set, steps, t.train_s + train_s)


def go_on(t: Trained, device: torch.device, checkpoint: bool = False, report=None,
          pause_at: int | None = None) -> Trained:
    """Continue ``t``, stopped at its pause, to its cap (or to the next ``pause_at``): the
    same weights, AdamW and scheduler state, data position and RNG, so that it is the run
    ``t``'s config trains unpaused.  ``t`` is spent.  ``checkpoint``: as :func:`train_one`.
    ValueError when ``t`` is not paused; DivergedError as training raises it."""
    module, ck, tc = t.module, t.checkpoint, t.cfg.train
    if not t.paused:
        raise ValueError("only a run stopped at its pause goes on")
    t.model.load_state_dict(ck.weights)
    t.model.train()  # as it trained (validation and scoring leave it in eval mode)
    module.resume(tc, ck.steps, ck.optimizer, ck.scheduler)
    module.pause_at = pause_at
    _set_rng_state(ck.rng, device)
    module.report = report
    stream = TrainStream(t.cfg.task, tc.batch_size, tc.seed, resume_from=ck.data)
    loader = torch.utils.data.DataLoader(stream, batch_size=None)
    end = tc.max_steps if tc.max_steps_limit is None else tc.max_steps_limit
    trainer = _trainer(device, False, end - ck.steps, tc.grad_clip)
    try:
        steps, train_s = _fit(trainer, module, loader, ck.steps)
    finally:
        module.report = None
    kept = (_kept(trainer, t.model, stream, steps, device)
            if module.paused(steps) or (checkpoint and steps == module.cap) else None)
    module.restore_best()
    return Trained(t.cfg, t.adapter, t.model, module, t.test_set, steps, t.train_s + train_s,
                   kept)
