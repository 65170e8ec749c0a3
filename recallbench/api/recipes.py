"""Training recipes: named presets of ``train`` keys (``train.recipe``).

``train.recipe: paper`` is the linear recipe of the paper's own code
(``config/MQAR__D_N__linear_trained__regime_0.json5`` and ``src/experiments/train.py`` of
yuvalko1/mamba-recall-scaling-laws, Koren et al. 2026).  Null (the default, left out of the
resolved config and its hash) is recallbench's own recipe, the :class:`TrainConfig`
defaults.  Where each value of the paper's recipe comes from:

=====================  ==========  ===================================================
key                    paper       the paper's code
=====================  ==========  ===================================================
``max_steps``          2000        ``training.max_num_steps``
``batch_size``         128         ``dataset.batch_size``
``lr``                 0.01        ``training.optimizer.learning_rate``
``betas``              0.9, 0.95   ``training.optimizer.betas``
``weight_decay``       0.0         ``training.optimizer.weight_decay``
``label_smoothing``    0.1         ``training.label_smoothing``
``grad_clip``          1.5         ``training.clip_grad_max_norm`` (``clip_grad: true``)
``warmup_frac``        0.05        ``scheduler.num_warmup_steps`` 100 of 2000
``decay_frac``         0.75        ``scheduler.num_decay_steps`` 1500 of 2000 (cosine to
                                   ``decay_factor`` 0); the 400 between are
                                   ``num_steps_at_max``
``early_stop``         null        ``training.threshold_accuracy`` 1: validation
                                   accuracy never exceeds it, so no run stops early
``patience``           null        (the paper's code has no plateau stop)
``val_every``          250         ``training.evaluate_any_num_steps``
``val_size``           10112       ``dataset.split_size.val`` 10000, read out as
                                   ceil(10000 / 128) = 79 whole batches of 128
                                   (``mqar/dataloaders.py``: ``num_batches``)
``test_size``          10112       ``dataset.split_size.test``, the same way
=====================  ==========  ===================================================

Three behaviours of the paper's code have no key of their own; the recipe name carries them
(:mod:`recallbench.harness.module`, :mod:`recallbench.harness.schedule`):

* **fresh validation sequences**: its validation loader generates new batches every time
  it is iterated, so each validation scores ``val_size`` sequences never seen before
  (drawn from a stream seeded by the run's seed), not one fixed set;
* **the warmup starts at 0**: its multiplier at (0-based) step s < warmup is s / warmup
  (the first update has learning rate 0), where recallbench's is (s + 1) / warmup;
* **validation after the step of index 250, 500, ...**: its loop validates when
  ``step > 0 and step % 250 == 0`` with ``step`` the 0-based index of the batch just
  trained, i.e. after 251, 501, ..., 1751 optimizer steps, and after the last (2000).

Not reproduced, as it changes no result: the validation before training (it only tests
the threshold 1, which it cannot exceed).  The test set, drawn once after training in
either code, is recallbench's fixed one (the same sequences for every run of the task).

**Explicit keys win.**  A recipe fills in only the ``train`` keys the config does not set;
a key set in the config file or by ``--set`` keeps its value (``--set train.recipe=paper
--set train.batch_size=64`` trains the paper's recipe at batch 64).  A recipe is a starting
point, so a sweep can vary one of its keys without repeating the rest, and nothing is
hidden: the record's resolved config lists every value the run used, the recipe's and the
overridden ones alike, beside ``recipe: paper``.  Refusing such a config instead would
make every one-key variation of the recipe impossible to express.
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
