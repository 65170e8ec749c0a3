"""The learning-rate schedule of the paper's code: warmup → flat → cosine to zero."""
from __future__ import annotations

import math


def warmup_flat_cosine(step: int, max_steps: int, warmup_frac: float, decay_frac: float,
                       from_zero: bool = False) -> float:
    """Multiplier of the base learning rate at ``step`` (0-based).

    Linear warmup over the first ``warmup_frac`` of the steps, flat at 1, then a
    cosine from 1 to 0 over the last ``decay_frac`` of the steps.  The warmup's
    multiplier is (step + 1) / warmup, or with ``from_zero`` step / warmup: the
    paper's code (``train.recipe: paper``), whose first update has learning rate 0.
    """
    warmup = int(round(warmup_frac * max_steps))
    decay = int(round(decay_frac * max_steps))
    if step < warmup:
        return (step + (0 if from_zero else 1)) / warmup
    start = max_steps - decay
    if decay == 0 or step < start:
        return 1.0
    progress = min(1.0, (step - start) / decay)
    return 0.5 * (1.0 + math.cos(math.pi * progress))
