"""A run config from ``@pytest.mark.recall(...)`` keywords and the ``recall(...)`` call.

    raw, plugin = build(layers(item, call_keys))   # raw config sections, plugin keys

Layers merge lowest first (module/class markers, the test's marker, the call's keywords).
A short name goes to the one section that has it (``vocab_size`` to ``task``, ``d_model``
to ``model``, ``max_steps`` to ``train``); a dotted ``section.key`` goes where it says;
``config={...}`` is a raw config under everything else; the plugin's own keys
(:data:`PLUGIN_KEYS`) are returned apart.  A bad key is a one-line ConfigError.
"""
from __future__ import annotations

import math

import pytest

from recallbench.api.canonical import SECTIONS, set_dotted
from recallbench.api.errors import ConfigError
from recallbench.pytest_plugin.factory import FACTORY_ADAPTER, register_factory

MARKER = "recall"
PLUGIN_KEYS = ("min_accuracy", "min_accuracy_reduced", "tolerance", "factory", "state_size",
               "config")


def layers(item: pytest.Item, call_keys: dict) -> list[dict]:
    """Keyword layers, lowest first: module/class markers, the test's marker(s), the call."""
    out = []
    for mark in reversed(list(item.iter_markers(MARKER))):
        if mark.args:
            raise ConfigError(f"@pytest.mark.recall takes keyword arguments only "
                              f"(got positional {mark.args!r})")
        out.append(dict(mark.kwargs))
    out.append(dict(call_keys))
    return out


def _deep_update(dst: dict, src: dict) -> dict:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _deep_update(dst[k], v)
        else:
            dst[k] = dict(v) if isinstance(v, dict) else v
    return dst


def _task_name(layer_list: list[dict]) -> str:
    """The task's name first: it decides which short names are task parameters."""
    task_name = "mqar"
    for layer in layer_list:
        cfg = layer.get("config")
        if isinstance(cfg, dict) and isinstance(cfg.get("task"), dict) and "name" in cfg["task"]:
            task_name = cfg["task"]["name"]
        task_name = layer.get("task.name", layer.get("task", task_name))
    if not isinstance(task_name, str):
        raise ConfigError(f"task = {task_name!r} is not allowed: a task name, e.g. 'mqar'")
    return task_name


def _fields(task_name: str) -> dict[str, list[str]]:
    """The short names each section takes (the task's are its dataclass fields)."""
    import dataclasses

    from recallbench.api.config import ModelConfig, TrainConfig
    from recallbench.api.registry import TASKS

    task_cls = TASKS.get(task_name)
    return {
        "task": [f.name for f in dataclasses.fields(task_cls) if f.init],
        "model": [f.name for f in dataclasses.fields(ModelConfig)],
        "train": [f.name for f in dataclasses.fields(TrainConfig)],
    }


def _merge_config(raw: dict, base) -> None:
    """A layer's ``config={...}`` under its other keys."""
    if not isinstance(base, dict):
        raise ConfigError(f"config = {base!r} is not allowed: a mapping with "
                          f"sections {', '.join(SECTIONS)}")
    for section, values in base.items():
        if section not in SECTIONS:
            raise ConfigError(f"config: unknown section {section!r}; allowed: "
                              f"{', '.join(SECTIONS)}")
        if not isinstance(values, dict):
            raise ConfigError(f"config: section {section} must be a mapping")
        _deep_update(raw[section], values)


def _owner(key: str, fields: dict[str, list[str]], task_name: str) -> str:
    """The one section a short name belongs to; ConfigError if none or several."""
    owners = [s for s in SECTIONS if key in fields[s]]
    if len(owners) > 1:
        raise ConfigError(f"key {key!r} is ambiguous ("
                          + ", ".join(f"{s}.{key}" for s in owners)
                          + "): pass it dotted, e.g. **{'" + f"{owners[-1]}.{key}"
                          + "': ...}")
    if owners:
        return owners[0]
    import difflib

    known = [*fields["task"], *fields["model"], *fields["train"], *PLUGIN_KEYS]
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        allowed = f"did you mean {close[0]}?"
    else:
        allowed = (f"allowed: task, keys of task {task_name} "
                   f"({', '.join(fields['task'])}), model keys "
                   f"({', '.join(fields['model'])}), train keys "
                   f"({', '.join(fields['train'])}), {', '.join(PLUGIN_KEYS)}, "
                   f"or section.key")
    raise ConfigError(f"unknown key {key!r}; {allowed}")


def build(layer_list: list[dict]) -> tuple[dict, dict]:
    """(raw config, plugin keys) from keyword layers; ConfigError names a bad key."""
    task_name = _task_name(layer_list)
    fields = _fields(task_name)
    raw: dict = {s: {} for s in SECTIONS}
    plugin: dict = {}
    for layer in layer_list:
        if layer.get("config") is not None:
            _merge_config(raw, layer["config"])
        for key, value in layer.items():
            if key == "config":
                continue
            if key in PLUGIN_KEYS:
                plugin[key] = value
            elif key == "task":
                raw["task"]["name"] = value
            elif "." in key:
                set_dotted(raw, key, value)
            else:
                raw[_owner(key, fields, task_name)][key] = value
    raw["task"].setdefault("name", task_name)
    _check_plugin_keys(plugin, raw)
    return raw, plugin


def _check_plugin_keys(plugin: dict, raw: dict) -> None:
    from recallbench.api.fields import fail

    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    for name in ("min_accuracy", "min_accuracy_reduced"):
        m = plugin.get(name)
        if m is not None and not (number(m) and 0 <= m <= 1):
            fail(name, m, "a number in [0, 1] or None")
    t = plugin.get("tolerance")
    if t is not None and not (number(t) and t >= 0):
        fail("tolerance", t, "a number >= 0 or None")
    s = plugin.get("state_size")
    if s is not None and not (isinstance(s, int) and not isinstance(s, bool) and s >= 0):
        fail("state_size", s, "an integer >= 0 or None")
    factory = plugin.get("factory")
    if factory is None:
        if s is not None:
            raise ConfigError("state_size= is only for factory= runs: a named adapter "
                              "reports its own state size")
        return
    if not callable(factory):
        fail("factory", factory, "a callable returning an nn.Module, "
             "e.g. lambda d_model, layer_idx: MyMixer(d_model)")
    adapter = raw["model"].get("adapter")
    if adapter is not None and adapter != FACTORY_ADAPTER:
        raise ConfigError(f"give adapter= ({adapter!r}) or factory=, not both")
    raw["model"]["adapter"] = FACTORY_ADAPTER
    options = dict(raw["model"].get("options") or {})
    options.update({"factory": register_factory(factory), "state_size": s})
    raw["model"]["options"] = options
