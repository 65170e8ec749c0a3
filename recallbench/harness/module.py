"""RecallModule: the LightningModule that trains a RecallModel on a recall task.

Loss: cross-entropy on labelled positions only, with optional label smoothing.
Optimizer: AdamW with the paper's betas (0.9, 0.95); schedule warmup → flat →
cosine to 0 (:mod:`recallbench.harness.schedule`), stepped every optimizer step.
Validation keeps the best weights seen (in memory) so that the test set is
scored on the best-validation model, as the paper reports, and adds to the run's
:class:`~recallbench.harness.convergence.History`, which stops the run at ``early_stop``
or on a plateau (``train.patience``) and judges whether it converged.
"""
from __future__ import annotations

import copy

import torch
from lightning import LightningModule

from recallbench.api.config import TrainConfig
from recallbench.harness.convergence import History
from recallbench.harness.loop import asked, labelled_loss
from recallbench.harness.metrics import RecallAccuracy
from recallbench.harness.model import RecallModel
from recallbench.harness.schedule import warmup_flat_cosine


class DivergedError(RuntimeError):
    """The training loss became NaN or infinite."""


class RecallModule(LightningModule):
    def __init__(self, model: RecallModel, train: TrainConfig, guess: float | None = None):
        super().__init__()
        self.model = model
        self.train_cfg = train
        self.val_metric = RecallAccuracy(top_k=train.top_k)
        self.best_val = -1.0
        self.best_step = 0
        self.best_state: dict[str, torch.Tensor] | None = None
        self.last_val_step = -1
        self.history = History(train.early_stop, train.patience, guess)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # (B, L) -> (B, L, V)
        return self.model(tokens)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        loss = labelled_loss(self.model, inputs, targets, self.train_cfg.label_smoothing)
        if not torch.isfinite(loss):
            raise DivergedError(f"training loss became {loss.item()} at step {self.global_step}")
        self.log("loss", loss, prog_bar=True, on_step=True, on_epoch=False, logger=False)
        return loss

    def validation_step(self, batch, batch_idx):
        inputs, targets = batch
        self.val_metric.update(*asked(self.model, inputs, targets))

    def on_validation_epoch_end(self):
        counts = self.val_metric.compute()
        acc, total = float(counts["accuracy"]), int(counts["total"])
        self.val_metric.reset()
        self.last_val_step = self.global_step
        if acc > self.best_val:
            self.best_val, self.best_step = acc, self.global_step
            self.best_state = copy.deepcopy(self.model.state_dict())
        if self.history.add(self.global_step, acc, total):
            self.trainer.should_stop = True
        self.log("val_accuracy", acc, prog_bar=True, logger=False)

    def configure_optimizers(self):
        cfg = self.train_cfg
        params = [p for p in self.model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=float(cfg.lr), betas=tuple(cfg.betas),
                                weight_decay=cfg.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: warmup_flat_cosine(step, cfg.max_steps, cfg.warmup_frac,
                                                 cfg.decay_frac))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def restore_best(self) -> None:
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
