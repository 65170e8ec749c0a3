"""A sweep's skip rules: which grid cells cannot be built, decided before resolving them.

``n_gt_d`` (``d_state > d_model``) is the model's rule; any other rule is the task's: the
task class's :meth:`~recallbench.api.task.Task.infeasible` names it (for example
``seq_len_lt_4nf``).  A cell that does not resolve is judged on its raw config with the
defaults filled in (:func:`with_defaults`), after :func:`check_generic` made sure that no
value is wrong on its own.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from recallbench.api.config import DEFAULT_TASK, ModelConfig, TrainConfig
from recallbench.api.errors import ConfigError

SKIP_RULES = ("n_gt_d", "seq_len_lt_4nf")


def skip_reason(view: Mapping[str, Any], rules: Mapping[str, bool]) -> str | None:
    """The name of the first skip rule that drops this config (a resolved or defaulted view).

    ``n_gt_d`` is the model's rule; any other rule is the task's: it applies when the task
    class's :meth:`~recallbench.api.task.Task.infeasible` answers its name.
    """
    model = view.get("model", {})
    if rules.get("n_gt_d"):
        n, d = model.get("d_state"), model.get("d_model")
        if _num(n) and _num(d) and n > d:
            return "n_gt_d"
    answer = _infeasible(view.get("task", {}))
    return answer if answer is not None and rules.get(answer) else None


def _infeasible(task: Mapping[str, Any]) -> str | None:
    """The task class's answer for these parameters; None for a task that does not load."""
    cls = _task_class(task.get("name"))
    if cls is None:
        return None
    return cls.infeasible({k: v for k, v in task.items() if k != "name"})


def _task_class(name: Any):
    """The registered task class called ``name``; None if there is none or it does not load."""
    from recallbench.api.registry import TASKS

    try:
        return TASKS.get(name) if isinstance(name, str) else None
    except ConfigError:
        return None


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def with_defaults(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A raw config with unset keys filled by their defaults, without validation.

    Used for the skip rules and filters of points that do not resolve (an MQAR cell with
    L < 4·N_f is rejected by the task itself, so it must be skipped before resolving).
    """
    task = dict(raw.get("task") or {}) or dict(DEFAULT_TASK)
    name = task.get("name", "mqar")
    cls = _task_class(name)
    defaults = {}
    if cls is not None and dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
    task = {"name": name, **defaults, **{k: v for k, v in task.items() if k != "name"}}
    model = {**dataclasses.asdict(ModelConfig()), **dict(raw.get("model") or {})}
    from recallbench.api.errors import ConfigError
    from recallbench.api.recipes import apply_recipe

    try:  # a recipe's keys count as set (a bad recipe name is left to resolving)
        raw_train = apply_recipe(raw.get("train")) or {}
    except ConfigError:
        raw_train = raw.get("train") or {}
    train = {**dataclasses.asdict(TrainConfig()), **dict(raw_train)}
    return {"task": task, "model": model, "train": train}


def check_generic(raw: Mapping[str, Any]) -> None:
    """The checks every config must pass, whatever its task or adapter allows.

    A point that does not resolve may still be dropped by a skip rule (MQAR rejects
    L < 4·N_f, the designed model N > D), but not when a value is wrong on its own: an
    unknown key, a wrong type, an out-of-range model or train setting.
    """
    from recallbench.api.fields import from_mapping
    from recallbench.api.registry import TASKS
    from recallbench.api.task import Task

    try:
        model = from_mapping(ModelConfig, raw.get("model"), "model")
        model.validate()
        from_mapping(TrainConfig, raw.get("train"), "train").validate()
        task_raw = dict(raw.get("task") or {}) or dict(DEFAULT_TASK)
        cls = TASKS.get(task_raw.pop("name", "mqar"))
        task = from_mapping(cls, task_raw, "task")
        Task.validate(task)  # the base checks only (V even, N_f fits the key vocabulary)
    except ConfigError:
        raise
    except Exception:  # a plugin's constructor doing more than storing fields: not ours to judge
        return
