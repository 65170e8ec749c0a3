"""Reading and writing leaderboard YAML as plain data, safely.

Files are read with :func:`recallbench.api.yaml_load.read_yaml` (the one bounded reader of
user YAML: size checked before parsing, PyYAML's safe loader, so no Python tags, duplicate
keys and deep nesting refused), with the leaderboard's stricter rule on top: aliases are
refused outright, since nothing a submission holds needs them.  Every problem is one line
naming the file.  Writing never emits aliases, so what we write the reader accepts.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from recallbench.api.errors import ConfigError
from recallbench.api.yaml_load import MAX_BYTES, read_yaml


def read_yaml_data(path: str | Path, what: str = "submission", limit: int = MAX_BYTES) -> Any:
    """Parse a YAML data file safely: size checked first, safe loader, no aliases."""
    try:
        return read_yaml(path, what, limit=limit, aliases=False)
    except ConfigError:
        raise
    except (ValueError, RecursionError) as exc:  # e.g. an integer of more than 4300 digits
        raise ConfigError(f"{what} {path}: unreadable value ({str(exc).split(':')[0][:80]})") from None


class _NoAliasDumper(yaml.SafeDumper):
    """Safe dumper that writes shared objects out in full (the reader refuses aliases)."""

    def ignore_aliases(self, data):
        return True


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, default_flow_style=None,
                     width=100, allow_unicode=False)
