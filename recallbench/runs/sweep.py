"""Sweep definitions: a base run config and axes to vary, expanded into grid points.

A sweep file (YAML, read with ``yaml.safe_load``)::

    base:                       # a run config: sections task, model, train
      task: {name: mqar, vocab_size: 512, seq_len: 64, num_facts: 16}
      model: {adapter: linear-mamba}
      train: {max_steps: 1500}
    axes:                       # dotted config keys → lists of values; the grid is their product
      model.d_model: [4, 8, 16]
      model.d_state: [2, 4, 8]
      train.seed: [0, 1]
    zip:                        # optional: axes varied together (equal lengths), one factor each
      - [model.n_layers, model.d_state]
    skip:                       # the paper's skip rules, both on by default
      n_gt_d: true              #   d_state > d_model
      seq_len_lt_4nf: true      #   the task says L is too short for N_f (Task.infeasible)
    where:                      # optional filters, all must hold: KEY OP KEY|LITERAL
      - model.d_state <= model.d_model
      - model.adapter != designed
      - any: [model.n_heads > 1, model.head_pattern == mva]   # at least one must hold

Expansion order is deterministic: factors in the order their axes first appear, the last
factor varying fastest (``itertools.product``).  Every point that survives the skip rules
and filters is resolved through :func:`recallbench.api.config.resolve`, so a bad value fails
before any work with one line naming the point's axis values.  Points are keyed by their
``config_hash``; two points with the same hash (an axis over an unhashed key such as
``train.threads``) are counted once.

Filters are parsed by a tiny parser (:mod:`recallbench.runs.filters`); nothing in a sweep
file is evaluated as code.
"""
from __future__ import annotations

import dataclasses
import itertools
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping

from recallbench.api.canonical import set_dotted
from recallbench.api.config import DEFAULT_TASK, SECTIONS, ModelConfig, RunConfig, TrainConfig, load_yaml, resolve
from recallbench.api.errors import ConfigError
from recallbench.runs.filters import KEY, AnyOf, Condition, parse_filter

TOP_KEYS = ("base", "axes", "zip", "skip", "where", "name", "description")
SKIP_RULES = ("n_gt_d", "seq_len_lt_4nf")


# -- skip rules ---------------------------------------------------------------------------

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
    train = {**dataclasses.asdict(TrainConfig()), **dict(raw.get("train") or {})}
    return {"task": task, "model": model, "train": train}


def _check_generic(raw: Mapping[str, Any]) -> None:
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


# -- points and sweeps ------------------------------------------------------------------

@dataclasses.dataclass
class Point:
    """One resolved grid point."""

    cfg: RunConfig
    axes: dict[str, Any]  # this point's value on every axis (dotted key → value)
    index: int  # position in the expansion order

    def __post_init__(self):
        self.hash: str = self.cfg.hash()
        self.config: dict[str, Any] = self.cfg.to_dict()  # canonical: resolve(config) == cfg

    def label(self) -> str:
        if not self.axes:
            return "(base)"
        return " ".join(f"{_short(k)}={_fmt(v)}" for k, v in self.axes.items())


def _short(key: str) -> str:
    return key.split(".", 1)[1] if key.count(".") >= 1 else key


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (dict, list)):
        return str(v).replace(" ", "")
    return str(v)


@dataclasses.dataclass
class Expansion:
    points: list[Point]
    grid_size: int  # cells of the full product, before skip rules and filters
    skipped: Counter  # rule or filter text → cells dropped
    duplicates: int  # cells whose config_hash equals an earlier cell's


@dataclasses.dataclass
class Sweep:
    base: dict[str, Any]
    axes: dict[str, list]
    zip: list[list[str]]
    skip: dict[str, bool]
    where: list[Condition | AnyOf]
    name: str = "sweep"
    path: Path | None = None

    # -- construction --------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], name: str = "sweep", path: Path | None = None) -> "Sweep":
        if not isinstance(data, Mapping):
            raise ConfigError(f"sweep {name}: expected a mapping with base and axes")
        for key in data:
            if key not in TOP_KEYS:
                raise ConfigError(f"sweep {name}: unknown key {key!r}; allowed: {', '.join(TOP_KEYS)}")
        base = _parse_base(data.get("base") or {}, name)
        axes = _parse_axes(data.get("axes") or {}, name)
        zips = _parse_zip(data.get("zip") or [], axes, name)
        skip = _parse_skip(data.get("skip", {}), name)
        where_raw = data.get("where") or []
        if isinstance(where_raw, str):
            where_raw = [where_raw]
        if not isinstance(where_raw, list):
            raise ConfigError(f"sweep {name}: where must be a list of comparisons")
        where = [parse_filter(t, f"sweep {name}: where[{i}]") for i, t in enumerate(where_raw)]
        return cls(base=base, axes=axes, zip=zips, skip=skip, where=where,
                   name=str(data.get("name") or name), path=path)

    # -- expansion -------------------------------------------------------------------
    def factors(self) -> list[list[dict[str, Any]]]:
        """One list of assignments (axis → value) per factor of the product, in order."""
        zipped = {k: g for g in self.zip for k in g}
        done: set[str] = set()
        out = []
        for key in self.axes:
            if key in done:
                continue
            group = zipped.get(key, [key])
            done.update(group)
            out.append([dict(zip(group, values))
                        for values in zip(*(self.axes[k] for k in group))])
        return out

    def cells(self) -> Iterable[dict[str, Any]]:
        for combo in itertools.product(*self.factors()):
            cell: dict[str, Any] = {}
            for part in combo:
                cell.update(part)
            yield {k: cell[k] for k in self.axes}  # axis order, whatever the zip grouping

    def raw_config(self, cell: Mapping[str, Any]) -> dict[str, Any]:
        import copy

        raw = copy.deepcopy(self.base)
        for key, value in cell.items():
            set_dotted(raw, key, copy.deepcopy(value), what="axis")
        return raw

    def expand(self) -> Expansion:
        points: list[Point] = []
        skipped: Counter = Counter()
        seen: set[str] = set()
        duplicates = grid = 0
        for cell in self.cells():
            grid += 1
            raw = self.raw_config(cell)
            label = " ".join(f"{k}={_fmt(v)}" for k, v in cell.items()) or "(base)"
            cfg, error = None, None
            try:
                cfg = resolve(raw)
                view = cfg.to_dict()
            except ConfigError as exc:
                error = exc
                try:
                    _check_generic(raw)  # nonsense (D = -1, a typo) is an error, skipped or not
                except ConfigError as bad:
                    raise ConfigError(f"sweep {self.name}: point {label}: {bad}") from None
                view = with_defaults(raw)
            try:
                reason = skip_reason(view, self.skip)
                if reason is None:
                    reason = next((c.text for c in self.where if not c.holds(view)), None)
            except ConfigError as exc:
                if error is not None:
                    reason = None  # report the resolve error below, it is the cause
                else:
                    raise ConfigError(f"sweep {self.name}: point {label}: {exc}") from None
            if reason is not None:
                skipped[reason] += 1
                continue
            if error is not None:
                raise ConfigError(f"sweep {self.name}: point {label}: {error}") from None
            point = Point(cfg, dict(cell), len(points))
            if point.hash in seen:
                duplicates += 1
                continue
            seen.add(point.hash)
            points.append(point)
        return Expansion(points, grid, skipped, duplicates)


def _parse_base(base: Any, name: str) -> dict[str, dict]:
    if not isinstance(base, Mapping):
        raise ConfigError(f"sweep {name}: base must be a run config (sections task, model, train)")
    for section, values in base.items():
        if section not in SECTIONS:
            raise ConfigError(f"sweep {name}: base: unknown section {section!r}; "
                              f"allowed: {', '.join(SECTIONS)}")
        if values is not None and not isinstance(values, Mapping):
            raise ConfigError(f"sweep {name}: base.{section} must be a mapping")
    return {s: dict(v or {}) for s, v in base.items()}


def _parse_axes(axes_raw: Any, name: str) -> dict[str, list]:
    if not isinstance(axes_raw, Mapping):
        raise ConfigError(f"sweep {name}: axes must map dotted keys to lists of values")
    axes: dict[str, list] = {}
    for key, values in axes_raw.items():
        if not isinstance(key, str) or not re.fullmatch(KEY, key):
            raise ConfigError(f"sweep {name}: axis {key!r} is not a dotted config key "
                              "such as model.d_model")
        if key.split(".", 1)[0] not in SECTIONS:
            raise ConfigError(f"sweep {name}: axis {key}: unknown section "
                              f"{key.split('.', 1)[0]!r}; allowed: {', '.join(SECTIONS)}")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"sweep {name}: axis {key} = {values!r} is not allowed: "
                              "expected a non-empty list of values")
        axes[key] = list(values)
    return axes


def _parse_zip(zips_raw: Any, axes: Mapping[str, list], name: str) -> list[list[str]]:
    if not isinstance(zips_raw, list) or not all(isinstance(g, list) for g in zips_raw):
        raise ConfigError(f"sweep {name}: zip must be a list of lists of axis names, "
                          "e.g. [[model.n_layers, model.d_state]]")
    zips, seen = [], set()
    for group in zips_raw:
        if len(group) < 2:
            raise ConfigError(f"sweep {name}: zip group {group} needs at least two axes")
        for key in group:
            if key not in axes:
                raise ConfigError(f"sweep {name}: zip names {key!r}, which is not an axis")
            if key in seen:
                raise ConfigError(f"sweep {name}: axis {key} is in two zip groups")
            seen.add(key)
        lengths = {len(axes[k]) for k in group}
        if len(lengths) > 1:
            sizes = ", ".join(f"{k}: {len(axes[k])}" for k in group)
            raise ConfigError(f"sweep {name}: zipped axes must have equal lengths ({sizes})")
        zips.append(list(group))
    return zips


def _parse_skip(skip_raw: Any, name: str) -> dict[str, bool]:
    if skip_raw is None or skip_raw is True:
        skip_raw = {}
    if skip_raw is False:
        skip_raw = {r: False for r in SKIP_RULES}
    if not isinstance(skip_raw, Mapping):
        raise ConfigError(f"sweep {name}: skip must map rule names ({', '.join(SKIP_RULES)}) "
                          "to true/false")
    skip = {r: True for r in SKIP_RULES}
    for rule, on in skip_raw.items():
        if rule not in SKIP_RULES:
            raise ConfigError(f"sweep {name}: unknown skip rule {rule!r}; "
                              f"known: {', '.join(SKIP_RULES)}")
        if not isinstance(on, bool):
            raise ConfigError(f"sweep {name}: skip.{rule} = {on!r} is not allowed: "
                              "expected true or false")
        skip[rule] = on
    return skip


def load_sweep(path: str | Path) -> Sweep:
    path = Path(path)
    data = load_yaml(path)
    return Sweep.from_dict(data, name=path.name, path=path)


# -- sharding ---------------------------------------------------------------------------

def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"i/n"`` → (i, n) with 0 <= i < n; None for None."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m:
        raise ConfigError(f"--shard {text!r} is not allowed: expected I/N, e.g. 0/4")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"--shard {text!r} is not allowed: need 0 <= I < N")
    return i, n


def shard_points(points: list[Point], shard: tuple[int, int] | None) -> list[Point]:
    """The points of shard (i, n): every n-th point in config_hash order, from the i-th.

    Deterministic on every machine for the same sweep file, balanced to within one point,
    and disjoint across shards; returned in expansion order.
    """
    if shard is None:
        return list(points)
    i, n = shard
    mine = {p.hash for rank, p in enumerate(sorted(points, key=lambda p: p.hash)) if rank % n == i}
    return [p for p in points if p.hash in mine]
