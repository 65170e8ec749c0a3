"""RecallModule: the LightningModule that trains a RecallModel on a recall task.

Loss: cross-entropy on the labelled positions (optional label smoothing); AdamW with the paper's
betas (0.9, 0.95); warmup → flat → cosine to 0 (:mod:`recallbench.harness.schedule`), stepped
every optimizer step.  Validation keeps the best weights (in memory), on which the test set is
scored as the paper reports, and feeds the run's :class:`~recallbench.harness.convergence.History`,
which stops the run (``early_stop``, ``train.patience``) and judges whether it converged.

**Validation** is the module's own (:meth:`validate`, not Lightning's loop): after every
``val_every``-th optimizer step and at the cap, the fixed validation set in eval mode; under
``train.recipe: paper`` (:mod:`recallbench.api.recipes`) fresh sequences after steps 251, 501, ...

**Extension** (``train.max_steps_limit``): a run not converged at its cap goes on with the cap
doubled, at most to the limit, with the same weights, AdamW moments, data stream and scheduler.
The schedule spans the current cap, so the lr restarts at its flat level (a warm restart, as
SGDR); the best-validation weights are kept.  The record counts the doublings (``extended``) and
the final cap (``max_steps_reached``); with ``train.lr_rung`` a run extends only while
:meth:`History.improving_before` holds.  :meth:`resume` continues a run stopped at its cap, or
paused (``pause_at``), from its checkpoint: step for step the run it would have been unstopped.
"""
from __future__ import annotations

import copy
from typing import Callable

import torch
from lightning import LightningModule

from recallbench.api.config import TrainConfig
from recallbench.api.recipes import paper_steps
from recallbench.harness.convergence import History
from recallbench.harness.loop import asked, labelled_loss
from recallbench.harness.metrics import recall_counts
from recallbench.harness.model import RecallModel
from recallbench.harness.schedule import warmup_flat_cosine


class DivergedError(RuntimeError):
    """The training loss became NaN or infinite."""


#: sequences per validation batch (the batches Lightning's evaluation loop was given)
VAL_BATCH = 512


class RecallModule(LightningModule):
    def __init__(self, model: RecallModel, train: TrainConfig, guess: float | None = None,
                 val_set: tuple[torch.Tensor, torch.Tensor] | None = None,
                 val_draw: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None,
                 report=None):
        super().__init__()
        self.model = model
        self.train_cfg = train
        self.val_set = val_set  # (inputs, targets): the fixed validation sequences
        self.val_draw = val_draw  # None, or fresh (inputs, targets) at every validation
        self.paper_steps = paper_steps(train.recipe)
        self.val_interval = min(train.val_every, train.max_steps)
        self.best_val = -1.0
        self.best_step = 0
        self.best_state: dict[str, torch.Tensor] | None = None
        self.last_val_step = -1
        self.history = History(train.early_stop, train.patience, guess)
        self.cap = train.max_steps  # the current cap: max_steps, doubled by each extension
        self.limit = train.max_steps_limit  # None: no extension
        self.extended = 0  # doublings of the cap
        self.step_offset = 0  # steps done before this Trainer (a continued run)
        self.pause_at: int | None = None  # stop after this step's validation (a pause)
        # (optimizer, scheduler, whether the cap doubles) to load at the next fit
        self._resume_state: tuple[dict, dict, bool] | None = None
        self._shown = True  # whether a progress bar shows the logged values (on_fit_start)
        # told after every step (``after_step``: a clock check, it writes every few seconds)
        self.report = report  # a recallbench.runs.progress.RunReport, or None
        self.last_val: float | None = None  # the latest validation accuracy

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # (B, L) -> (B, L, V)
        return self.model(tokens)

    def on_fit_start(self):
        # The progress bar is the only reader of the logged values (no logger): without one,
        # logging them would cost Lightning's per-step bookkeeping for nothing (see the
        # module's docstring for what it cost a CPU step).
        self._shown = self.trainer.progress_bar_callback is not None

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        """The batch as it is where it is already on ``device`` (a CPU run): Lightning's
        default walks the collection to move each tensor, at every step."""
        if all(t.device == device for t in batch):
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        loss = labelled_loss(self.model, inputs, targets, self.train_cfg.label_smoothing)
        if not torch.isfinite(loss):
            raise DivergedError(f"training loss became {loss.item()} at step {self.steps_done}")
        if self._shown:
            self.log("loss", loss, prog_bar=True, on_step=True, on_epoch=False, logger=False)
        return loss

    @property
    def steps_done(self) -> int:
        """Optimizer steps of the run so far (the Trainer's, plus any before it)."""
        return self.global_step + self.step_offset

    def on_train_batch_end(self, outputs, batch, batch_idx):
        step = self.steps_done
        at_cap = self.limit is not None and step == self.cap
        if self.validates_after(step) or at_cap:
            acc = self.validate(step)
            if self._shown:
                self.log("val_accuracy", acc, prog_bar=True, logger=False)
        if step == self.pause_at:
            self.trainer.should_stop = True
        if self.report is not None:
            self.report.after_step(step, self.cap, self.last_val)

    def validates_after(self, step: int) -> bool:
        """Whether the run validates once ``step`` optimizer steps are done (the cap aside)."""
        if self.paper_steps:  # the paper's loop: after the batch of index k·val_every, k ≥ 1
            return step > 1 and (step - 1) % self.val_interval == 0
        return step % self.val_interval == 0

    @torch.inference_mode()
    def _val_counts(self) -> tuple[int, int]:
        """(correct, total) top-1 of the model on the validation set (fresh sequences when
        ``val_draw`` is given)."""
        if self.val_draw is not None:
            inputs, targets = self.val_draw()
            inputs, targets = inputs.to(self.device), targets.to(self.device)
        else:
            inputs, targets = self.val_set
            if inputs.device != self.device:  # moved once, not at every validation
                self.val_set = inputs, targets = inputs.to(self.device), targets.to(self.device)
        modes = [(m, m.training) for m in self.model.modules()]
        self.model.eval()
        correct = total = 0
        try:
            for i in range(0, len(inputs), VAL_BATCH):
                logits, answers = asked(self.model, inputs[i:i + VAL_BATCH],
                                        targets[i:i + VAL_BATCH])
                c, _, t = recall_counts(logits, answers, self.train_cfg.top_k)
                correct, total = correct + c, total + t
        finally:
            for m, training in modes:
                m.training = training
        return correct, total

    def validate(self, step: int) -> float:
        """Validate the current weights at ``step``: keep them if they are the best so far,
        add to the History, and stop the run (``trainer.should_stop``) at early_stop, on a
        plateau, or at a cap it does not extend.  Returns the accuracy."""
        correct, total = self._val_counts()
        acc = correct / max(total, 1)
        self.last_val_step, self.last_val = step, acc
        if acc > self.best_val:
            self.best_val, self.best_step = acc, step
            self.best_state = copy.deepcopy(self.model.state_dict())
        stop = self.history.add(step, acc, total)
        if not stop and self.limit is not None and step >= self.cap:
            stop = not self._extend()
        if stop and self._trainer is not None:
            self.trainer.should_stop = True
        return acc

    def paused(self, steps: int) -> bool:
        """Whether the run, ``steps`` in, stopped at its pause (not at a stop of its own)."""
        return steps == self.pause_at and self.history.stop_reason is None and steps < self.cap

    def anneal_start(self) -> int:
        """The first step of the current cap's cosine decay."""
        return self.cap - int(round(self.train_cfg.decay_frac * self.cap))

    def converged(self) -> bool:
        """The History's judgment; with ``train.lr_rung`` set, also converged when the
        steps before the anneal bought no more than the anneal (:meth:`History.improving_before`)."""
        if self.history.converged():
            return True
        judged = self.train_cfg.lr_rung is not None and self.last_val_step == self.cap
        return judged and not self.history.improving_before(self.anneal_start())

    def summary(self, trainable: bool = True) -> dict:
        """The record's convergence fields (:meth:`History.summary`, :meth:`converged`)."""
        out = self.history.summary(trainable)
        return {**out, "converged": out["converged"] or (trainable and self.converged())}

    def extends(self) -> bool:
        """Whether the run, at its cap, goes on: a limit above the cap, not converged."""
        return (self.limit is not None and self.cap < self.limit and not self.converged())

    def _extend(self) -> bool:
        """At the cap: double it (at most to the limit) when the run has not converged;
        False when it stops here."""
        if not self.extends():
            return False
        self._double_cap(self.lr_schedulers())
        return True

    def _double_cap(self, sched) -> None:
        self.cap = min(2 * self.cap, self.limit)
        self.extended += 1
        # the lr of the next step was set under the old cap (its end of the cosine, ~0)
        for group, base, fn in zip(sched.optimizer.param_groups, sched.base_lrs,
                                   sched.lr_lambdas):
            group["lr"] = base * fn(sched.last_epoch)

    def resume(self, train: TrainConfig, steps: int, optimizer: dict, scheduler: dict) -> None:
        """Go on from a checkpoint ``steps`` steps in, under ``train``'s limit (at
        :meth:`configure_optimizers` of the next fit: AdamW's and the scheduler's state are
        loaded; from the cap, the cap then doubles as :meth:`_extend` would have doubled it;
        from a pause before it, the cap stays)."""
        if steps > self.cap:
            raise ValueError(f"a run continues from its cap ({self.cap} steps) or before, "
                             f"not {steps}")
        self.train_cfg, self.limit = train, train.max_steps_limit
        if steps == self.cap and not self.extends():
            raise ValueError("a run continues only while its limit allows and it improves")
        self.step_offset = steps
        self._resume_state = (optimizer, scheduler, steps == self.cap)

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
                                                 cfg.decay_frac, self.paper_steps))
        if self._resume_state is not None:
            opt_state, sched_state, doubles = self._resume_state
            self._resume_state = None
            opt.load_state_dict(opt_state)
            sched.load_state_dict(sched_state)
            if doubles:
                self._double_cap(sched)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def restore_best(self) -> None:
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
