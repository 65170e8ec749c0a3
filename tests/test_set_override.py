"""``--set section.key=value`` reads its value as the same field of a YAML config file
would: a quoted (or tagged) value is a string, so an integer field refuses it the same way
from both, in one line, before anything trains."""
from __future__ import annotations

import pytest


def _trains(*args, **kwargs):
    raise AssertionError("a refused config must not train")


@pytest.mark.parametrize("field,text", [
    ("model.d_model", '"64"'),
    ("model.d_state", "'8'"),
    ("train.max_steps", '"10"'),
    ("train.seed", "'3'"),
])
def test_a_quoted_integer_is_refused_by_set_as_by_the_file(cli, tmp_path, monkeypatch, field, text):
    monkeypatch.setattr("recallbench.harness.train.run", _trains)
    section, key = field.split(".")
    (tmp_path / "c.yaml").write_text(f"{section}:\n  {key}: {text}\n")
    from_file = cli("run", "--quiet", "c.yaml")
    from_set = cli("run", "--quiet", "--set", f"{field}={text}")
    for rc, out, err in (from_file, from_set):
        assert rc == 2 and out == ""
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert f"{field} = " in err and "expected an integer" in err
    assert from_file[2] == from_set[2]
    assert not (tmp_path / "runs").exists()


def test_plain_set_values_keep_their_meaning():
    from recallbench.api.config import parse_value

    assert parse_value("64") == 64
    assert parse_value("1e-3") == 0.001  # YAML 1.1 reads it as text; a plain number here
    assert parse_value(" 1e-3 ") == 0.001
    assert parse_value('"64"') == "64" and parse_value("'1e-3'") == "1e-3"
    assert parse_value("!!str 1e-3") == "1e-3"
    assert parse_value("linear-mamba") == "linear-mamba"
