"""Registries: built-ins, third-party entry points, lazy and fault-tolerant loading."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from recallbench.api.errors import ConfigError, UnavailableError
from recallbench.api.registry import ADAPTERS, TASKS, Registry
from recallbench.api.task import Task

THIRD_PARTY_TASK = '''
import dataclasses, torch
from recallbench.api.task import IGNORE, Task

@dataclasses.dataclass
class CopyFirst(Task):
    """Recall the first token at the last position (a toy third-party task)."""
    description = "toy: recall the first token"
    vocab_size: int = 16
    num_facts: int = 1
    seq_len: int = 8

    @property
    def num_queries(self):
        return 1

    def sample(self, batch_size, generator=None, device=None):
        x = torch.randint(1, self.vocab_size // 2, (batch_size, self.seq_len), generator=generator)
        y = torch.full_like(x, IGNORE)
        y[:, -1] = x[:, 0] + self.vocab_size // 2
        return x, y
'''


def test_builtin_names():
    assert {"mqar", "ar", "mqar-repeated-keys"} <= set(TASKS.names())
    assert {"linear-mamba", "designed", "attention"} <= set(ADAPTERS.names())


def test_unknown_name_suggests_close_ones():
    with pytest.raises(ConfigError, match=r"unknown task 'mqr'; did you mean mqar"):
        TASKS.get("mqr")
    with pytest.raises(ConfigError, match=r"unknown adapter 'linear_mamba'; did you mean linear-mamba"):
        ADAPTERS.get("linear_mamba")


@pytest.mark.slow
def test_third_party_task_through_entry_point(plugin_dist, cli_subprocess):
    plugin_dist({"recallbench.tasks": [("copy-first", "rb_copyfirst:CopyFirst"),
                                       ("broken", "rb_broken:Nope")]},
                {"rb_copyfirst": THIRD_PARTY_TASK, "rb_broken": "raise ImportError('no wheels')"})
    reg = Registry("task", "recallbench.tasks", "recallbench.tasks")
    assert {"copy-first", "broken"} <= set(reg.names())
    task = reg.get("copy-first").from_params({"seq_len": 6})
    x, y = task.sample(4)
    assert x.shape == (4, 6)
    with pytest.raises(ConfigError, match="broken.*failed to load: ImportError: no wheels"):
        reg.get("broken")
    rows = {r[0]: r for r in reg.describe()}
    assert rows["copy-first"][2] and not rows["broken"][2]

    # the CLI lists it, with the broken one marked, and runs it by name
    rc, out, err = cli_subprocess("list", "tasks")
    assert rc == 0, err
    assert "copy-first" in out and "unavailable: task 'broken'" in out
    rc, out, err = cli_subprocess("run", "--quiet", "--set",
                       "task.name=copy-first task.seq_len=6 model.d_model=16 model.d_state=4 "
                       "train.max_steps=5 train.val_size=8 train.test_size=8", "--out", "r.json")
    assert rc == 0, err
    assert "copy-first" in out and "accuracy" in out


@pytest.mark.slow
def test_broken_plugin_does_not_break_import(plugin_dist):
    plugin_dist({"recallbench.adapters": [("bad", "rb_bad_adapter:X")]},
                {"rb_bad_adapter": "raise RuntimeError('boom at import')"})
    code = ("import recallbench; from recallbench.api.registry import ADAPTERS; "
            "print(ADAPTERS.describe()[0:0] == [] and 'bad' in ADAPTERS.names())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


# -- run-time registration: add / remove / origin / require ------------------------------

@dataclasses.dataclass
class NeedsTheMoon(Task):
    """A task that exists but cannot run on this machine."""

    vocab_size: int = 16
    num_facts: int = 1

    @classmethod
    def availability(cls):
        return False, "needs the moon"


@pytest.fixture
def moon():
    """NeedsTheMoon added to TASKS as "test-moon" for one test, removed afterwards."""
    TASKS.add("test-moon", NeedsTheMoon, origin="rb-moon")
    yield NeedsTheMoon
    if "test-moon" in TASKS.names():
        TASKS.remove("test-moon")


def test_add_registers_a_plugin_with_its_origin(moon):
    assert TASKS.get("test-moon") is moon and moon.name == "test-moon"
    assert "test-moon" in TASKS.names()
    assert TASKS.origin("test-moon") == "rb-moon"
    assert TASKS.origin("mqar") == "built-in"
    assert ("test-moon", "rb-moon", False, "needs the moon") in TASKS.describe()


def test_add_refuses_a_taken_name(moon):
    with pytest.raises(ValueError, match=r"task 'test-moon' is already registered \(from rb-moon\)"):
        TASKS.add("test-moon", NeedsTheMoon)
    with pytest.raises(ValueError, match=r"task 'mqar' is already registered \(from built-in\)"):
        TASKS.add("mqar", NeedsTheMoon)
    assert TASKS.get("mqar") is not NeedsTheMoon


def test_remove_forgets_the_name(moon):
    TASKS.remove("test-moon")
    assert "test-moon" not in TASKS.names()
    with pytest.raises(ConfigError, match="unknown task 'test-moon'"):
        TASKS.get("test-moon")
    with pytest.raises(KeyError, match="task 'test-moon' is not registered"):
        TASKS.remove("test-moon")
    with pytest.raises(ConfigError, match="unknown task 'test-moon'"):
        TASKS.origin("test-moon")


def test_require_names_why_a_plugin_cannot_run(moon):
    with pytest.raises(UnavailableError) as err:
        TASKS.require("test-moon", where="sweep point 3")
    assert str(err.value) == "sweep point 3: task test-moon cannot run here: needs the moon"
    with pytest.raises(UnavailableError, match="^task test-moon cannot run here: needs the moon$"):
        TASKS.require("test-moon")
    assert TASKS.require("mqar") is TASKS.get("mqar")
    with pytest.raises(ConfigError, match="unknown task 'mqr'"):
        TASKS.require("mqr")
