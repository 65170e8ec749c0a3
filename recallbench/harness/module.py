"""RecallModule: the LightningModule that trains a RecallModel on a recall task.

Loss: cross-entropy on labelled positions only, with optional label smoothing.
Optimizer: AdamW with the paper's betas (0.9, 0.95); schedule warmup → flat →
cosine to 0 (:mod:`recallbench.harness.schedule`), stepped every optimizer step.
Validation keeps the best weights seen (in memory) so that the test set is
scored on the best-validation model, as the paper reports, and adds to the run's
:class:`~recallbench.harness.convergence.History`, which stops the run at ``early_stop``
or on a plateau (``train.patience``) and judges whether it converged.

**Extension** (``train.max_steps_limit`` set): at the cap (first ``max_steps``) the run is
validated, and if it has not converged (:meth:`History.converged`: still improving, or with
patience still at the guess level) the cap doubles, at most to the limit, and the same
run goes on: the same weights, AdamW moments, data stream and scheduler, nothing rebuilt
(Lightning's step budget is the limit from the start; the module asks it to stop at the
current cap).  The record counts the doublings (``extended``) and the final cap
(``max_steps_reached``).  The schedule always spans the current cap C: once C doubles, the
steps from C on follow the schedule of a 2C-step run (warmup is long over; with the
default decay_frac 0.5 the flat phase returns, then the cosine decays to 0 over the last
half of 2C).  So the learning rate, annealed to ~0 at C, restarts at the flat level: a
warm restart (as SGDR), which is what lets a run stuck on a plateau of the annealed phase
move again; the alternatives, stretching the finished decay (the lr stays ~0, nothing
moves) or re-running warmup, either waste the extension or repeat what was done.  The
best-validation weights are kept throughout, so the restart's transient cannot lower the
recorded accuracy.
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
        self.cap = train.max_steps  # the current cap: max_steps, doubled by each extension
        self.limit = train.max_steps_limit  # None: no extension
        self.extended = 0  # doublings of the cap
        self._cap_check = False  # the module asked Lightning to validate at the cap

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

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.limit is not None and self.global_step == self.cap:
            # Lightning validates a run asked to stop; on_validation_epoch_end then decides
            # whether it stops at this cap or goes on with the cap doubled
            self.trainer.should_stop = self._cap_check = True

    def on_validation_epoch_end(self):
        counts = self.val_metric.compute()
        acc, total = float(counts["accuracy"]), int(counts["total"])
        self.val_metric.reset()
        self.last_val_step = self.global_step
        if acc > self.best_val:
            self.best_val, self.best_step = acc, self.global_step
            self.best_state = copy.deepcopy(self.model.state_dict())
        stop = self.history.add(self.global_step, acc, total)
        if not stop and self.limit is not None and self.global_step >= self.cap:
            stop = not self._extend()
        if stop:
            self.trainer.should_stop = True
        elif self._cap_check:
            self.trainer.should_stop = False
        self._cap_check = False
        self.log("val_accuracy", acc, prog_bar=True, logger=False)

    def _extend(self) -> bool:
        """At the cap: double it (at most to the limit) when the run has not converged;
        False when it stops here."""
        if self.history.converged() or self.cap >= self.limit:
            return False
        self.cap = min(2 * self.cap, self.limit)
        self.extended += 1
        # the lr of the next step was set under the old cap (its end of the cosine, ~0)
        sched = self.lr_schedulers()
        for group, base, fn in zip(sched.optimizer.param_groups, sched.base_lrs,
                                   sched.lr_lambdas):
            group["lr"] = base * fn(sched.last_epoch)
        return True

    def extension(self) -> dict:
        """The record's ``extended`` (doublings of the cap) and ``max_steps_reached`` (the
        cap the run ended under)."""
        return {"extended": self.extended, "max_steps_reached": self.cap}

    def configure_optimizers(self):
        cfg = self.train_cfg
        params = [p for p in self.model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=float(cfg.lr), betas=tuple(cfg.betas),
                                weight_decay=cfg.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: warmup_flat_cosine(step, self.cap, cfg.warmup_frac,
                                                 cfg.decay_frac))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def restore_best(self) -> None:
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
