"""The run configuration: three sections, ``task``, ``model``, ``train``.

The key names are a contract shared by the CLI, sweeps, the pytest plugin and
leaderboards.  A config is loaded from YAML (``yaml.safe_load``), overridden
with ``--set section.key=value``, validated field by field, and hashed in its
canonical form (sorted JSON of the fully resolved values), so the same run
always has the same ``config_hash``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

import yaml

from recallbench.api.canonical import EXECUTION_KEYS, SECTIONS, config_hash, set_dotted
from recallbench.api.errors import ConfigError
from recallbench.api.fields import check_range, fail, from_mapping

HEAD_PATTERNS = ("mha", "mqa", "mka", "mva")


@dataclasses.dataclass
class ModelConfig:
    adapter: str = "linear-mamba"
    d_model: int = 64  # D
    d_state: int = 16  # N
    n_layers: int = 1  # Λ
    d_conv: int = 2  # causal depthwise Conv1D width (1 = no conv)
    n_heads: int = 1  # M
    head_pattern: str | None = None  # which of B, C, x heads share; null: the adapter's default
    expand: int = 2  # D_in = expand · D
    options: dict = dataclasses.field(default_factory=dict)  # adapter-specific extras

    def validate(self) -> None:
        check_range("model.d_model", self.d_model, 1)
        check_range("model.d_state", self.d_state, 1)
        check_range("model.n_layers", self.n_layers, 1)
        check_range("model.d_conv", self.d_conv, 1)
        check_range("model.n_heads", self.n_heads, 1)
        check_range("model.expand", self.expand, 1)
        if self.head_pattern is not None and self.head_pattern not in HEAD_PATTERNS:
            fail("model.head_pattern", self.head_pattern, f"one of {', '.join(HEAD_PATTERNS)}")


@dataclasses.dataclass
class TrainConfig:
    max_steps: int = 2000
    batch_size: int = 64
    lr: float = 1e-2  # the paper's code
    weight_decay: float = 0.0
    seed: int = 0
    early_stop: float | None = 0.999  # stop once validation accuracy exceeds this; null: never
    val_size: int = 512  # fixed validation sequences
    test_size: int = 2048  # fixed test sequences
    threads: int | None = None  # CPU threads; null: pick the fastest for the model size
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    val_every: int = 25  # steps between validations
    warmup_frac: float = 0.05  # linear warmup over this fraction of max_steps
    decay_frac: float = 0.5  # cosine decay to 0 over the last fraction of max_steps
    grad_clip: float | None = 1.0
    label_smoothing: float = 0.1
    betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.95])
    top_k: int = 5  # listwise recall: the right value among the top k
    progress: bool = True  # progress bar on a terminal

    def validate(self) -> None:
        check_range("train.max_steps", self.max_steps, 0)
        check_range("train.batch_size", self.batch_size, 1)
        if not self.lr > 0:
            fail("train.lr", self.lr, "must be > 0")
        check_range("train.weight_decay", self.weight_decay, 0.0)
        check_range("train.seed", self.seed, 0)
        if self.early_stop is not None:
            check_range("train.early_stop", self.early_stop, 0.0, 1.0)
        check_range("train.val_size", self.val_size, 1)
        check_range("train.test_size", self.test_size, 1)
        if self.threads is not None:
            check_range("train.threads", self.threads, 1)
        dev = self.device
        if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
            fail("train.device", dev, "one of auto, cpu, cuda, cuda:N")
        check_range("train.val_every", self.val_every, 1)
        check_range("train.warmup_frac", self.warmup_frac, 0.0, 1.0)
        check_range("train.decay_frac", self.decay_frac, 0.0, 1.0 - self.warmup_frac,
                    "(warmup_frac + decay_frac must not exceed 1)")
        if self.grad_clip is not None and not self.grad_clip > 0:
            fail("train.grad_clip", self.grad_clip, "must be > 0 or null")
        check_range("train.label_smoothing", self.label_smoothing, 0.0, 0.99)
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            fail("train.betas", self.betas, "two numbers in [0, 1)")
        check_range("train.top_k", self.top_k, 1)


DEFAULT_TASK: dict[str, Any] = {"name": "mqar", "vocab_size": 128, "seq_len": 64, "num_facts": 16}


@dataclasses.dataclass
class RunConfig:
    """A validated run: the task (a Task instance), the model and training settings."""

    task: Any  # recallbench.api.task.Task
    model: ModelConfig
    train: TrainConfig

    @property
    def task_name(self) -> str:
        return type(self.task).name

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": {"name": self.task_name, **self.task.params()},
            "model": dataclasses.asdict(self.model),
            "train": dataclasses.asdict(self.train),
        }

    def hash(self) -> str:
        return config_hash(self.to_dict())


def parse_value(text: str) -> Any:
    """A ``--set`` value, read as YAML: ``3`` → 3, ``1e-3`` → 0.001, ``null`` → None."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        try:
            return float(value)  # YAML 1.1 reads "1e-3" as a string
        except ValueError:
            return value
    return value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` strings (several may share one argument, space-separated)."""
    raw = {s: dict(v or {}) for s, v in raw.items()}
    for item in overrides:
        for pair in item.split():
            key, sep, text = pair.partition("=")
            parts = key.split(".")
            if not sep or len(parts) < 2 or not all(parts):
                raise ConfigError(f"--set {pair!r}: expected section.key=value, e.g. model.d_state=8")
            if parts[0] not in SECTIONS:
                raise ConfigError(f"--set {pair!r}: unknown section {parts[0]!r}; "
                                  f"allowed: {', '.join(SECTIONS)}")
            set_dotted(raw, key, parse_value(text), what="--set")
    return raw


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config {path} is not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping with sections task, model, train")
    return data


def resolve(raw: Mapping[str, Any] | None = None) -> RunConfig:
    """Validate a raw mapping (YAML + overrides) into a RunConfig; ConfigError if bad."""
    from recallbench.api.registry import ADAPTERS, TASKS

    raw = dict(raw or {})
    for section in raw:
        if section not in SECTIONS:
            raise ConfigError(f"unknown config section {section!r}; allowed: {', '.join(SECTIONS)}")
        if raw[section] is not None and not isinstance(raw[section], Mapping):
            raise ConfigError(f"config section {section} must be a mapping")
    task_raw = dict(raw.get("task") or {})
    if not task_raw:
        task_raw = dict(DEFAULT_TASK)
    name = task_raw.pop("name", "mqar")
    if not isinstance(name, str):
        fail("task.name", name, "a task name (see `recallbench list tasks`)")
    task = TASKS.get(name).from_params(task_raw)

    model = from_mapping(ModelConfig, raw.get("model"), "model")
    model.validate()
    ADAPTERS.get(model.adapter)(model)  # unknown adapter or option: one-line error
    train = from_mapping(TrainConfig, raw.get("train"), "train")
    train.validate()
    return RunConfig(task, model, train)
