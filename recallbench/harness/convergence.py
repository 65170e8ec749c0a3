"""When a run stops, and whether it converged: one validation history, kept alike by the single
run (:class:`recallbench.harness.module.RecallModule`) and by each ensemble member.

A run stops at ``train.early_stop`` (a validation accuracy strictly above it), on a plateau
(``train.patience`` validations in a row that raise the best accuracy by no more than the set
resolves, :meth:`History.resolution`), else at the cap ``train.max_steps``.  With patience set,
the wait starts only once a validation exceeds the task's guess level by :data:`GUESS_MARGIN`
binomial standard errors (:attr:`History.left_guess`): a run still guessing is not on a plateau;
with null patience the guess level plays no part.  ``converged``: stopped at early_stop or on a
plateau, or reached the cap on one (its last ``patience`` validations, :data:`PLATEAU_WINDOW`
when null, raised nothing); false means the accuracy is a lower bound.  ``steps_to``: the first
validation step reaching each of :data:`LEVELS`.  :meth:`History.improving_before` (a cap under
``train.lr_rung``): did the window before the anneal gain more than the anneal did?

    >>> h = History(early_stop=0.99, patience=2)
    >>> for step, acc in [(25, 0.4), (50, 0.6), (75, 0.6), (100, 0.6)]:
    ...     _ = h.add(step, acc)
    >>> h.stop_reason, h.converged(), h.steps_to()
    ('plateau', True, {'0.5': 50, '0.9': None, '0.99': None})
"""
from __future__ import annotations

import math

#: the smallest improvement of the best validation accuracy that counts, whatever the size
#: of the validation set (about 8 queries of 512 sequences of 16 queries)
MIN_DELTA = 1e-3
#: validations judged for a plateau at the cap when ``train.patience`` is null
PLATEAU_WINDOW = 10
#: the accuracies whose first validation step a record reports (``steps_to``)
LEVELS = (0.5, 0.9, 0.99)
#: standard errors of the guess level (on the validation queries) by which a validation
#: accuracy must exceed it before patience counts (see the module's docstring)
GUESS_MARGIN = 3.0


def guess_of(task) -> float | None:
    """The top-1 guess level of ``task`` (:meth:`~recallbench.api.task.Task.guess_level`), or
    None for a task that cannot say (a plugin task without ``num_facts``)."""
    try:
        level = float(task.guess_level(1))
    except (AttributeError, NotImplementedError, TypeError, ValueError, ZeroDivisionError):
        return None
    return level if 0.0 <= level < 1.0 else None


class History:
    """The validations of one run, its stopping rule and its convergence."""

    def __init__(self, early_stop: float | None, patience: int | None,
                 guess: float | None = None):
        self.early_stop, self.patience = early_stop, patience
        # the guess level matters only to patience (see the module's docstring)
        self.guess = guess if patience is not None else None
        self.left_guess = self.guess is None  # a validation exceeded the guess level clearly
        self.points: list[tuple[int, float]] = []
        self.reference = -1.0  # best accuracy that counted as an improvement
        self.wait = 0  # validations since it (counted once the guess level is left)
        self.stop_reason: str | None = None  # "early_stop" | "plateau" | None (not stopped)
        self.left_at: int | None = -1 if self.left_guess else None  # step it left the guess
        self.total: int | None = None  # validation queries of the latest validation

    def resolution(self, total: int | None) -> float:
        """The smallest gain over the best accuracy so far that counts: its binomial
        standard error on ``total`` validation queries, sqrt(p (1 - p) / total), and at
        least :data:`MIN_DELTA` (only MIN_DELTA when ``total`` is unknown)."""
        p = min(max(self.reference, 0.0), 1.0)
        if not total:
            return MIN_DELTA
        return max(MIN_DELTA, math.sqrt(p * (1.0 - p) / total))

    def guess_threshold(self, total: int | None) -> float | None:
        """The accuracy a validation of ``total`` queries must exceed to leave the guess
        level: guess + :data:`GUESS_MARGIN` · sqrt(g (1 - g) / total), the margin at least
        :data:`MIN_DELTA` (only MIN_DELTA when ``total`` is unknown); None without a guess."""
        if self.guess is None:
            return None
        g = self.guess
        se = math.sqrt(g * (1.0 - g) / total) if total else 0.0
        return g + max(MIN_DELTA, GUESS_MARGIN * se)

    def add(self, step: int, accuracy: float, total: int | None = None) -> bool:
        """Record a validation of ``total`` queries; True when the run should stop now."""
        self.points.append((step, accuracy))
        counting = self.left_guess  # the validation that leaves the guess level starts the wait
        self.total = total
        if not counting and accuracy > self.guess_threshold(total):
            self.left_guess, self.left_at = True, step
        if accuracy > self.reference + self.resolution(total):
            self.reference, self.wait = accuracy, 0
        elif counting:
            self.wait += 1
        if self.stop_reason is None:
            if self.early_stop is not None and accuracy > self.early_stop:
                self.stop_reason = "early_stop"
            elif self.patience is not None and self.wait >= self.patience:
                self.stop_reason = "plateau"
        return self.stop_reason is not None

    def converged(self) -> bool:
        """Stopped at early_stop or on a plateau, or at the cap on a plateau."""
        if self.stop_reason is not None:
            return True
        window = self.patience if self.patience is not None else PLATEAU_WINDOW
        return bool(self.points) and self.wait >= window

    def improving_before(self, anneal_start: int) -> bool:
        """Whether the last window of validations at or before ``anneal_start`` raised the
        best accuracy by more than the resolution and than the validations after it did
        (the module's docstring); True where that cannot be judged."""
        window = self.patience if self.patience is not None else PLATEAU_WINDOW
        before = [a for s, a in self.points if s <= anneal_start]
        if len(before) <= window or self.left_at is None or self.left_at > anneal_start:
            return True
        at_start = max(before)
        flat_gain = at_start - max(before[:-window])
        anneal_gain = max(a for _, a in self.points) - at_start
        p = min(max(at_start, 0.0), 1.0)
        res = max(MIN_DELTA, math.sqrt(p * (1 - p) / self.total)) if self.total else MIN_DELTA
        return flat_gain > max(res, anneal_gain)

    def steps_to(self) -> dict[str, int | None]:
        """First validation step at which the accuracy reached each of :data:`LEVELS`."""
        return {f"{level:g}": next((s for s, a in self.points if a >= level), None)
                for level in LEVELS}

    def summary(self, trainable: bool = True) -> dict:
        """The record's fields: ``converged``, ``stop_reason``, ``steps_to``.  A model
        with nothing to train (an evaluation-only adapter) converged by definition, with a
        null stop reason; a trainable one given no steps did not."""
        if not trainable:
            return {"converged": True, "stop_reason": None, "steps_to": self.steps_to()}
        return {"converged": self.converged(), "stop_reason": self.stop_reason or "max_steps",
                "steps_to": self.steps_to()}
