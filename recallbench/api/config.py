"""The run configuration: three sections, ``task``, ``model``, ``train``.

The key names are a contract shared by the CLI, sweeps, the pytest plugin and
leaderboards.  A config is loaded from YAML (:mod:`recallbench.api.yaml_load`: bounded
in size, depth and aliases), its sections checked, overridden with
``--set section.key=value``, validated field by field, and hashed in its canonical form
(sorted JSON of the fully resolved values), so the same run always has the same
``config_hash``.

:func:`resolve` checks everything it can before importing a plugin (and with it torch):
the sections, every number finite, the model and training fields and their upper
bounds (:data:`LIMITS`), the task's size fields; only then the task and the adapter.
A bad config is rejected in a fraction of a second.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping


from recallbench.api.canonical import EXECUTION_KEYS, SECTIONS, config_hash, set_dotted
from recallbench.api.errors import ConfigError
from recallbench.api.fields import check_finite, check_range, fail, from_mapping, is_number, short
from recallbench.api.recipes import apply_recipe, check_recipe
from recallbench.api.yaml_load import NotYAML, parse_yaml, read_mapping

HEAD_PATTERNS = ("mha", "mqa", "mka", "mva")
CPUS = os.cpu_count() or 1
NAME_CHARS = 100  # no task or adapter name is longer

#: Upper bounds of the size fields (dotted key → largest value).  Past these no run fits
#: a machine this benchmark targets; what fits this machine is then bounded by
#: :func:`recallbench.harness.resources.check_memory`.  ``recallbench theory`` uses the
#: same bounds for its flags.
LIMITS: dict[str, int] = {
    "task.vocab_size": 2**24, "task.seq_len": 2**20, "task.num_facts": 2**23,
    "model.d_model": 2**16, "model.d_state": 2**16, "model.n_layers": 1024,
    "model.d_conv": 1024, "model.n_heads": 4096, "model.expand": 64,
    "train.max_steps": 10**9, "train.batch_size": 2**20, "train.val_size": 2**24,
    "train.test_size": 2**24, "train.val_every": 10**9, "train.top_k": 2**24,
    "train.seed": 2**32 - 1, "train.threads": CPUS, "train.patience": 10**9,
    "train.max_steps_limit": 10**9,
}

#: ``train.lr: auto``: the learning rates a search tries, a log grid over [1e-4, 3e-2]
#: (the window in which Okpekpe & Orvieto (2025) find Mamba solves MQAR lies inside it)
AUTO_LRS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
#: the most learning rates one search may try (each is a whole training run)
MAX_LRS = 16
#: train keys left out of the resolved config (and so of its hash) while they are null:
#: keys added after the first records, whose null is the behaviour of those records
OMITTED_WHEN_NULL = ("patience", "max_steps_limit", "recipe", "lr_rung")
#: the allowed ``train.lr_rung`` (a fraction of ``max_steps``, open at both ends)
LR_RUNG_RANGE = (0.0, 1.0)
LR_FORMS = (f"a number > 0, a list of 1 to {MAX_LRS} numbers > 0, or auto "
            f"(the log grid {', '.join(f'{x:g}' for x in AUTO_LRS)})")


def check_limit(field: str, value: float, lo: float | None = None, why: str = "") -> None:
    """:func:`check_range` of ``field`` against ``lo`` and its upper bound in :data:`LIMITS`."""
    check_range(field, value, lo, LIMITS.get(field), why)


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
        for name in ("d_model", "d_state", "n_layers", "d_conv", "n_heads", "expand"):
            check_limit(f"model.{name}", getattr(self, name), 1)
        if len(self.adapter) > NAME_CHARS:
            fail("model.adapter", self.adapter, "an adapter name (see `recallbench list adapters`)")
        if self.head_pattern is not None and self.head_pattern not in HEAD_PATTERNS:
            fail("model.head_pattern", self.head_pattern, f"one of {', '.join(HEAD_PATTERNS)}")


@dataclasses.dataclass
class TrainConfig:
    max_steps: int = 2000  # the cap: a run stops earlier at early_stop or on a plateau
    batch_size: int = 64
    #: a number (the paper's code: 1e-2), or a search: a list of numbers or "auto"
    #: (:data:`AUTO_LRS`); a search trains every candidate and keeps the best by
    #: validation accuracy (:mod:`recallbench.harness.lr_search`).  Resolved to a sorted
    #: list without duplicates ("auto" to its grid); a list of one is that number.
    lr: Any = 1e-2  # float | list[float] | "auto", checked by check_lr (one message)
    weight_decay: float = 0.0
    seed: int = 0
    early_stop: float | None = 0.999  # stop once validation accuracy exceeds this; null: never
    #: validations without an improvement of the best validation accuracy by more than the
    #: validation set resolves (one standard error, at least
    #: :data:`recallbench.harness.convergence.MIN_DELTA`) before the run stops as converged
    #: (a plateau); null: never.  Default null, for three reasons: it is the behaviour of
    #: every record made before patience existed, so their config hashes (stores,
    #: baselines, leaderboard submissions) stay valid (a null patience is left out of the
    #: resolved config); MQAR training often sits on a plateau for hundreds of steps before
    #: a sudden jump, which a short patience would cut; and with the warmup → flat →
    #: cosine schedule a plateau of the flat phase is often lifted by the decay, which a
    #: run stopped early never reaches.  Either way the record says whether the run
    #: converged (see :mod:`recallbench.harness.convergence`); set e.g. 20 (500 steps at
    #: val_every 25) with a large max_steps to train "until converged".
    patience: int | None = None
    #: train to convergence, not to the cap: a run that reaches ``max_steps`` still
    #: improving (not converged) continues from its own weights, optimizer and schedule
    #: state with the cap doubled, again at each cap, until it converges or its cap reaches
    #: this limit (the last doubling stops at it).  The record's ``extended`` counts the
    #: doublings and ``max_steps_reached`` is the final cap.  Null (the default, left out
    #: of the resolved config and its hash): the cap is ``max_steps``.  Single runs only
    #: (a batched ensemble refuses it); see :mod:`recallbench.harness.module` for the
    #: schedule.  Set ``patience`` too: with null patience a run at the guess level for
    #: :data:`~recallbench.harness.convergence.PLATEAU_WINDOW` validations counts as
    #: converged and is not extended.
    max_steps_limit: int | None = None
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
    #: a preset of the keys above (:mod:`recallbench.api.recipes`): ``paper``, the paper
    #: code's linear recipe; keys set explicitly win over it.  Null (the default, left out
    #: of the resolved config and its hash): recallbench's own recipe, the defaults above
    recipe: str | None = None
    #: an lr search by successive halving (:mod:`recallbench.harness.lr_halving`): every
    #: candidate trains this fraction of ``max_steps`` (under the full run's schedule), only
    #: the best by validation goes on; at its cap a run extends only if it was still
    #: improving before its anneal.  Null (the default, left out of the resolved config and
    #: its hash): every candidate trains to ``max_steps``, extension as documented above
    lr_rung: float | None = None

    def validate(self) -> None:
        check_recipe(self.recipe)
        if self.lr_rung is not None and not LR_RUNG_RANGE[0] < self.lr_rung < LR_RUNG_RANGE[1]:
            fail("train.lr_rung", self.lr_rung,
                 "a fraction of train.max_steps in (0, 1), or null")
        check_limit("train.max_steps", self.max_steps, 0)
        if self.max_steps_limit is not None:
            check_limit("train.max_steps_limit", self.max_steps_limit, self.max_steps,
                        "(at least train.max_steps), or null")
        check_limit("train.batch_size", self.batch_size, 1)
        self.lr = check_lr(self.lr)
        if self.patience is not None:
            check_limit("train.patience", self.patience, 1, "(validations), or null")
        check_range("train.weight_decay", self.weight_decay, 0.0)
        check_limit("train.seed", self.seed, 0, "(seeds are 32-bit)")
        if self.early_stop is not None:
            check_range("train.early_stop", self.early_stop, 0.0, 1.0)
        check_limit("train.val_size", self.val_size, 1)
        check_limit("train.test_size", self.test_size, 1)
        if self.threads is not None:
            check_limit("train.threads", self.threads, 1, "(the CPUs of this machine)")
        dev = self.device
        if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
            fail("train.device", dev, "one of auto, cpu, cuda, cuda:N")
        check_limit("train.val_every", self.val_every, 1)
        check_range("train.warmup_frac", self.warmup_frac, 0.0, 1.0)
        check_range("train.decay_frac", self.decay_frac, 0.0, 1.0 - self.warmup_frac,
                    "(warmup_frac + decay_frac must not exceed 1)")
        if self.grad_clip is not None and not self.grad_clip > 0:
            fail("train.grad_clip", self.grad_clip, "must be > 0 or null")
        check_range("train.label_smoothing", self.label_smoothing, 0.0, 0.99)
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            fail("train.betas", self.betas, "two numbers in [0, 1)")
        check_limit("train.top_k", self.top_k, 1)


def check_lr(lr: Any) -> float | list[float]:
    """``train.lr`` in its resolved form: a number > 0, or a sorted list of 2 to
    :data:`MAX_LRS` distinct numbers > 0 (``"auto"``: :data:`AUTO_LRS`); ConfigError else."""
    if lr == "auto":
        return list(AUTO_LRS)
    values = lr if isinstance(lr, list) else [lr]
    if (isinstance(lr, str) or not 1 <= len(values) <= MAX_LRS
            or not all(is_number(v) and 0 < v < 1e300 for v in values)):
        fail("train.lr", lr, LR_FORMS)
    values = sorted({float(v) for v in values})
    return values if len(values) > 1 else values[0]


def lr_text(lr: float | list[float]) -> str:
    """A resolved ``train.lr`` for a message: ``0.01`` or ``[0.001, 0.01]``."""
    return f"[{', '.join(f'{x:g}' for x in lr)}]" if isinstance(lr, list) else f"{lr:g}"


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
        train = {k: v for k, v in dataclasses.asdict(self.train).items()
                 if not (k in OMITTED_WHEN_NULL and v is None)}
        return {
            "task": {"name": self.task_name, **self.task.params()},
            "model": dataclasses.asdict(self.model),
            "train": train,
        }

    def hash(self) -> str:
        return config_hash(self.to_dict())


def parse_value(text: str, what: str = "--set value") -> Any:
    """A ``--set`` value, read as YAML: ``3`` → 3, ``1e-3`` → 0.001, ``null`` → None; text
    that is not YAML stays a string.

    A quoted or tagged value (``"64"``, ``!!str 64``) is a string, as the same text is in
    a config file, so a field refuses it the same way from both; only a plain scalar that
    YAML 1.1 leaves as text but reads as a number (``1e-3``) becomes that number.
    """
    try:
        value = parse_yaml(text, what)
    except NotYAML:
        return text
    if isinstance(value, str) and value == text.strip():  # plain: no quotes, tag or anchor
        try:
            return float(value)  # YAML 1.1 reads "1e-3" as a string
        except ValueError:
            return value
    return value


def check_sections(raw: Any, where: str = "config") -> dict[str, Any]:
    """``raw`` as a dict of known sections, each a mapping or null; ConfigError otherwise."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping with sections {', '.join(SECTIONS)}")
    for section, values in raw.items():
        if section not in SECTIONS:
            raise ConfigError(f"unknown config section {short(section)}; "
                              f"allowed: {', '.join(SECTIONS)}")
        if values is not None and not isinstance(values, Mapping):
            raise ConfigError(f"config section {section} must be a mapping of keys to values, "
                              f"not {short(values)}")
    return dict(raw)


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` strings (several may share one argument, space-separated)."""
    raw = {s: dict(v or {}) for s, v in check_sections(raw).items()}
    for item in overrides:
        for pair in item.split():
            key, sep, text = pair.partition("=")
            parts = key.split(".")
            if not sep or len(parts) < 2 or not all(parts):
                raise ConfigError(f"--set {short(pair)}: expected section.key=value, "
                                  "e.g. model.d_state=8")
            if parts[0] not in SECTIONS:
                raise ConfigError(f"--set {short(pair)}: unknown section {short(parts[0])}; "
                                  f"allowed: {', '.join(SECTIONS)}")
            set_dotted(raw, key, parse_value(text, f"--set {short(key)[1:-1]}"), what="--set")
    return raw


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A run config file: bounded YAML (:func:`~recallbench.api.yaml_load.read_mapping`)
    whose sections are checked, before any override is applied to them."""
    data = read_mapping(path, "config", must=f"a mapping with sections {', '.join(SECTIONS)}")
    return check_sections(data, f"config {path}")


def _check_task_sizes(task_raw: Mapping[str, Any], train: TrainConfig) -> None:
    """The upper bounds of the task's contract keys, and top_k against the vocabulary,
    before the task's plugin (and torch) loads."""
    for field, hi in LIMITS.items():
        section, _, key = field.partition(".")
        if section == "task" and is_number(task_raw.get(key)):
            check_range(field, task_raw[key], hi=hi)
    if is_number(task_raw.get("vocab_size")):
        check_range("train.top_k", train.top_k, 1, task_raw["vocab_size"], "(the vocabulary size)")
    name = task_raw.get("name", "mqar")
    if not isinstance(name, str) or len(name) > NAME_CHARS:
        fail("task.name", name, "a task name (see `recallbench list tasks`)")


def resolve(raw: Mapping[str, Any] | None = None) -> RunConfig:
    """Validate a raw mapping (YAML + overrides) into a RunConfig; ConfigError if bad.

    The cheap checks (sections, finite numbers, model and training fields, the task's size
    bounds) come first; the task and adapter plugins load only once they pass.
    """
    raw = check_sections(raw)
    for section, values in raw.items():
        check_finite(values, section)
    model = from_mapping(ModelConfig, raw.get("model"), "model")
    model.validate()
    train = from_mapping(TrainConfig, apply_recipe(raw.get("train")), "train")
    train.validate()
    task_raw = dict(raw.get("task") or DEFAULT_TASK)
    _check_task_sizes(task_raw, train)
    name = task_raw.pop("name", "mqar")

    from recallbench.api.registry import ADAPTERS, TASKS

    task = TASKS.get(name).from_params(task_raw)
    ADAPTERS.get(model.adapter)(model)  # unknown adapter or option: one-line error
    check_range("train.top_k", train.top_k, 1, task.vocab_size, "(the vocabulary size)")
    return RunConfig(task, model, train)
