"""When a run stops, and whether it converged: one validation history, kept the same way
by the single run (:class:`recallbench.harness.module.RecallModule`) and by each member of
a batched ensemble (:mod:`recallbench.harness.ensemble_train`).

Every validation adds ``(step, accuracy)``.  The run stops

* at ``early_stop``: the accuracy exceeds ``train.early_stop`` (strictly, as Lightning's
  ``EarlyStopping``);
* on a plateau: ``train.patience`` validations in a row did not raise the best accuracy
  by more than :data:`MIN_DELTA` (null patience: never);
* else at ``train.max_steps``, the cap.

``converged`` is true when the run stopped at early_stop or on a plateau, and also when it
reached the cap on a plateau (its last ``patience`` validations, :data:`PLATEAU_WINDOW`
when patience is null, raised nothing by more than MIN_DELTA): the cap did not cut it
short.  It is false when the run hit the cap while still improving, so its accuracy is a
lower bound of what the layer can recall, not its capacity.  ``steps_to[level]`` is the
first validation step whose accuracy reached ``level`` (:data:`LEVELS`), null if none did.

    >>> h = History(early_stop=0.99, patience=2)
    >>> for step, acc in [(25, 0.4), (50, 0.6), (75, 0.6), (100, 0.6)]:
    ...     _ = h.add(step, acc)
    >>> h.stop_reason, h.converged(), h.steps_to()
    ('plateau', True, {'0.5': 50, '0.9': None, '0.99': None})
"""
from __future__ import annotations

#: an improvement of the best validation accuracy by at most this much does not count:
#: about 8 queries of the default validation set (512 sequences of 16 queries)
MIN_DELTA = 1e-3
#: validations judged for a plateau at the cap when ``train.patience`` is null
PLATEAU_WINDOW = 10
#: the accuracies whose first validation step a record reports (``steps_to``)
LEVELS = (0.5, 0.9, 0.99)


class History:
    """The validations of one run, its stopping rule and its convergence."""

    def __init__(self, early_stop: float | None, patience: int | None):
        self.early_stop, self.patience = early_stop, patience
        self.points: list[tuple[int, float]] = []
        self.reference = -1.0  # best accuracy that counted as an improvement
        self.wait = 0  # validations since it
        self.stop_reason: str | None = None  # "early_stop" | "plateau" | None (not stopped)

    def add(self, step: int, accuracy: float) -> bool:
        """Record a validation; True when the run should stop now."""
        self.points.append((step, accuracy))
        if accuracy > self.reference + MIN_DELTA:
            self.reference, self.wait = accuracy, 0
        else:
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
