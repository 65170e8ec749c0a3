"""recallbench.api.yaml_load: the one bounded reader of YAML, with libyaml's parser and
with PyYAML's own (where it was built without libyaml): the same data, the same refusals."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from recallbench.api import yaml_load
from recallbench.api.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
LOADERS = [pytest.param(True, id="libyaml",
                        marks=pytest.mark.skipif(yaml_load._CLoader is None,
                                                 reason="PyYAML built without libyaml")),
           pytest.param(False, id="pure-python")]


@pytest.fixture(params=LOADERS)
def parse(request, monkeypatch):
    if not request.param:
        monkeypatch.setattr(yaml_load, "_CLoader", None)
    return yaml_load.parse_yaml


def test_a_committed_submission_reads_as_pyyaml_reads_it(parse):
    path = REPO / "leaderboards" / "cpu-v4" / "submissions" / "mamba2.yaml"
    text = path.read_text()
    assert parse(text, "s", aliases=False) == yaml.safe_load(text)


def test_aliases_expand_where_allowed(parse):
    assert parse("a: &a [1, 2]\nb: *a\n", "f") == {"a": [1, 2], "b": [1, 2]}


@pytest.mark.parametrize("text, aliases, match", [
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", True, r"f: nested deeper than 50 levels \(line 1\)"),
    ("a: " + "[" * 60 + "]" * 60 + "\n", True, r"f: nested deeper than 50 levels"),
    ("".join(" " * i + f"k{i}:\n" for i in range(60)) + " " * 60 + "v\n", True,
     "nested deeper than 50 levels"),
    ("a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", False, "f: YAML aliases are not allowed here"),
    ("a: &a [x]\nb: {<<: *a}\n", False, "aliases are not allowed"),
    ("".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 7))
     .replace("*l0", "x"), True, "f: more than 100000 values once aliases are expanded"),
    ("a: &a [*a]\n", True, "recursive alias"),
    ("a: 1\nb: 2\na: 3\n", True, r"f: duplicate key 'a' \(line 3\)"),
    ("a: !!python/object/apply:os.system ['true']\n", True, "only plain YAML data is allowed"),
    ("a: [1, 2\n", True, "f: not valid YAML at line"),
])
def test_a_bad_document_is_refused_in_one_line(parse, text, aliases, match):
    with pytest.raises(ConfigError, match=match) as err:
        parse(text, "f", aliases=aliases)
    assert "\n" not in str(err.value)
