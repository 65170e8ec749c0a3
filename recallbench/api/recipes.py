"""Training recipes: named presets of ``train`` keys (``train.recipe``).

``train.recipe: paper`` is the linear recipe of the paper's code (Koren et al. 2026,
yuvalko1/mamba-recall-scaling-laws: ``config/MQAR__D_N__linear_trained__regime_0.json5`` and
``src/experiments/train.py``); null, the default, left out of the config and its hash, is
recallbench's own (the :class:`TrainConfig` defaults).  Its values and their sources there:
max_steps 2000 (``training.max_num_steps``), batch_size 128 (``dataset.batch_size``), lr 0.01,
betas (0.9, 0.95), weight_decay 0 (``training.optimizer.*``), label_smoothing 0.1
(``training.label_smoothing``), grad_clip 1.5 (``training.clip_grad_max_norm``), warmup_frac
0.05, decay_frac 0.75 (``scheduler.num_warmup_steps`` 100 and ``num_decay_steps`` 1500 of 2000,
cosine to 0), early_stop null (``training.threshold_accuracy`` 1, never exceeded), patience null
(no plateau stop), val_every 250 (``training.evaluate_any_num_steps``), val_size and test_size
10112 (``dataset.split_size`` 10000 read as ceil(10000/128) = 79 batches of 128).

The name also carries three behaviours without a key (:mod:`recallbench.harness.module`,
:mod:`recallbench.harness.schedule`): each validation scores fresh sequences (a stream seeded by
the run's seed); the warmup multiplier is s / warmup (the first update at lr 0), not (s + 1) /
warmup; validation follows the steps of 0-based index 250, 500, ... and the last.  The test set
stays recallbench's fixed one.  Explicit keys win: a recipe fills only the keys left unset.
"""
from __future__ import annotations

from typing import Any, Mapping

from recallbench.api.fields import fail

#: recipe name → the ``train`` keys it sets (explicit keys win, see the module docstring)
RECIPES: dict[str, dict[str, Any]] = {
    "paper": {
        "max_steps": 2000, "batch_size": 128, "lr": 0.01, "betas": [0.9, 0.95],
        "weight_decay": 0.0, "label_smoothing": 0.1, "grad_clip": 1.5,
        "warmup_frac": 0.05, "decay_frac": 0.75, "early_stop": None, "patience": None,
        "val_every": 250, "val_size": 10112, "test_size": 10112,
    },
}
RECIPE_NAMES = "null (recallbench's default recipe) or one of: " + ", ".join(RECIPES)


def check_recipe(name: Any) -> None:
    """ConfigError in one line unless ``name`` is null or a known recipe."""
    if name is not None and not (isinstance(name, str) and name in RECIPES):
        fail("train.recipe", name, RECIPE_NAMES)


def apply_recipe(train: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The raw ``train`` section with its recipe's keys filled in where it sets none."""
    if not isinstance(train, Mapping) or train.get("recipe") is None:
        return train
    check_recipe(train["recipe"])
    return {**RECIPES[train["recipe"]], **train}


def fresh_validation(recipe: str | None) -> bool:
    """Whether each validation draws new sequences (the paper's code) instead of reading
    the fixed validation set."""
    return recipe == "paper"


def paper_steps(recipe: str | None) -> bool:
    """Whether the schedule's warmup starts at 0 and validation follows the step of index
    k·val_every, as in the paper's code (see the module docstring)."""
    return recipe == "paper"
