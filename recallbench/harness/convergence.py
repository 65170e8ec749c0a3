"""When a run stops, and whether it converged: one validation history, kept the same way
by the single run (:class:`recallbench.harness.module.RecallModule`) and by each member of
a batched ensemble (:mod:`recallbench.harness.ensemble.train`).

Every validation adds ``(step, accuracy)``.  The run stops

* at ``early_stop``: the accuracy exceeds ``train.early_stop`` (strictly, as Lightning's
  ``EarlyStopping``);
* on a plateau: ``train.patience`` validations in a row did not raise the best accuracy
  by more than the validation set can resolve (:meth:`History.resolution`: one standard
  error of the best accuracy on the validation queries, at least :data:`MIN_DELTA`; null
  patience: never), counted only once validation has left the guess level (below);
* else at ``train.max_steps``, the cap.

``converged`` is true when the run stopped at early_stop or on a plateau, and also when it
reached the cap on a plateau (its last ``patience`` validations, :data:`PLATEAU_WINDOW`
when patience is null, raised nothing beyond that resolution): the cap did not cut it
short.  It is false when the run hit the cap while still improving, or (patience set)
still at the guess level, so its accuracy is a lower bound of what the layer can recall,
not its capacity.  ``steps_to[level]`` is the
first validation step whose accuracy reached ``level`` (:data:`LEVELS`), null if none did.

    >>> h = History(early_stop=0.99, patience=2)
    >>> for step, acc in [(25, 0.4), (50, 0.6), (75, 0.6), (100, 0.6)]:
    ...     _ = h.add(step, acc)
    >>> h.stop_reason, h.converged(), h.steps_to()
    ('plateau', True, {'0.5': 50, '0.9': None, '0.99': None})

A gain smaller than the validation set's standard error is not a gain the set can tell
from the model's fluctuation: with 2,048 validation queries at accuracy 0.46 the standard
error is 0.011, so creeping by 0.002 a validation is a plateau, not progress.

    >>> h = History(early_stop=None, patience=3)
    >>> [h.add(50 * i, 0.46 + 0.002 * i, total=2048) for i in range(1, 5)]
    [False, False, False, True]

**Patience counts only once validation has left the guess level.**  Given the task's
guess level ``guess`` (:meth:`recallbench.api.task.Task.guess_level`, top-1: the accuracy
of guessing uniformly among the values in the context, 1/N_f for MQAR), the ``wait`` does
not start until a validation accuracy exceeds ``guess`` by :data:`GUESS_MARGIN` binomial
standard errors of the guess level on the validation queries, sqrt(g (1 - g) / total), at
least :data:`MIN_DELTA` (:meth:`History.left_guess`).  MQAR training typically sits at the
bag-of-values guess for many validations and then jumps: that is a run that has not
started recalling, not one that has converged, so it neither stops on a plateau nor is
judged converged at the cap.  Why three standard errors and not one or two: a model still
guessing draws a fresh, nearly independent guess at every validation, and over the ~100
validations of a long run a one-sided 2-sigma excursion (2.3% each) is close to certain,
a 3-sigma one (0.13% each) unlikely; a wrong "left" restores the old rule (patience could
stop the run at the guess level), a wrong "not yet" only trains on to the cap, so the
stricter margin errs on the honest side.  Real learning leaves the guess level by far more.

    >>> g = History(early_stop=None, patience=2, guess=0.25)   # 1/N_f with N_f = 4
    >>> [g.add(25 * i, 0.25, total=1024) for i in range(1, 7)]
    [False, False, False, False, False, False]
    >>> g.left_guess, g.wait, [g.add(s, 0.6, total=1024) for s in (175, 200, 225)]
    (False, 0, [False, False, True])

**Improving before the anneal** (:meth:`History.improving_before`, used at a cap when
``train.lr_rung`` is set): a run whose accuracy still rises at its cap may owe that rise to
the cosine anneal alone, which any cap ends with; doubling the cap (a warm restart) buys
only what more steps at the peak learning rate buy.  The evidence for that is the gain of
the last window (``patience`` validations, :data:`PLATEAU_WINDOW` when null) before the
anneal began.  The run is judged still improving when that gain exceeds both the
resolution and what the anneal added since; a run not yet off the guess level at the
anneal's start, or with fewer validations before it than a window, is judged improving.

The guess level is used only where patience is set: with null patience nothing counts
patience, and the cap's plateau judgment (:data:`PLATEAU_WINDOW`) stays that of the records
made before the guess level existed, so their ``converged`` keeps its meaning.
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
