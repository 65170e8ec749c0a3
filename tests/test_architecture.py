"""The layout is the architecture: these tests keep it readable.

* the core (``recallbench/``) is grouped by role: few modules at its top, none too long;
* its packages are layered, and no module imports one of a higher layer (:data:`LAYERS`);
* the core names no plugin: no string literal in it is a task's or adapter's name, or a
  library's, apart from the config's defaults and the law's own vocabulary (README.md,
  "Architecture");
* nothing in the repository cites a file that the repository does not hold.
"""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from recallbench import ADAPTERS, TASKS

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "recallbench"
MAX_LINES = 400
MAX_TOP_MODULES = 12
DEFAULTS_MODULE = CORE / "api" / "config.py"  # the config's defaults name one task and adapter


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                          *patterns], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_core_is_grouped_by_role():
    top = [p.name for p in CORE.glob("*.py")]
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules directly in recallbench/: {top}"
    long = {str(p.relative_to(ROOT)): n for p in [*core_modules(), *ROOT.glob("tasks/**/*.py"),
                                                  *ROOT.glob("adapters/**/*.py")]
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


# -- layers ------------------------------------------------------------------------------

#: The core's packages, lowest first.  A module may import its own layer and the ones below,
#: never one above: the contracts (api) know nothing of a run, one run (harness), the law
#: and the probe know nothing of sweeps and stores (runs), those know nothing of
#: leaderboards or the pytest plugin, and nothing but the command line imports the cli.
#: The package itself (``recallbench/__init__.py``) re-exports the contracts: layer 0.
LAYERS = {"api": 0, "harness": 1, "law": 1, "probe": 1, "runs": 2,
          "leaderboard": 3, "pytest_plugin": 3, "cli": 4}
TOP = 0


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool = False):
    """(line, dotted name) of every module an import in ``source`` names, at module level
    or inside a function; ``from X import a`` names ``X.a`` as well (``a`` may be a module),
    relative imports are resolved against ``module``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[:len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def layer_of(name: str) -> int | None:
    """The layer of a core module (``recallbench.<package>...``), TOP for the package itself
    and its own modules; None outside the core (numpy) and for a name the package exports
    (``from recallbench import TASKS``).  Any other name under ``recallbench`` is -1: a
    plugin package (``recallbench.tasks``) or a package missing from LAYERS."""
    import recallbench

    parts = name.split(".")
    if parts[0] != "recallbench":
        return None
    if len(parts) == 1 or (CORE / f"{parts[1]}.py").is_file():
        return TOP
    if parts[1] in LAYERS:
        return LAYERS[parts[1]]
    return None if parts[1] in recallbench.__all__ else -1


def layer_violations(path: Path, source: str | None = None) -> list[str]:
    """What a core module imports against the layering: a higher layer, or a plugin."""
    rel = path.relative_to(CORE).parts
    own = LAYERS[rel[0]] if len(rel) > 1 else TOP
    module = _module_name(path)
    bad: dict[int, str] = {}  # line -> the shortest name it imports against the layering
    for line, name in imported_modules(path.read_text() if source is None else source,
                                       module, path.name == "__init__.py"):
        layer = layer_of(name)
        if (layer == -1 or (layer is not None and layer > own)) \
                and len(name) < len(bad.get(line, name + ".")):
            bad[line] = name
    found = []
    for line, name in sorted(bad.items()):
        layer = layer_of(name)
        why = ("the core imports no plugin, and no package missing from LAYERS" if layer == -1
               else f"layer {layer} ({name.split('.')[1]}) above its own {own}")
        found.append(f"{path.relative_to(ROOT)}:{line} imports {name}: {why}")
    return found


def test_layers_name_every_core_package():
    packages = {p.parent.name for p in CORE.glob("*/__init__.py")}
    assert packages == set(LAYERS), (f"core packages missing from LAYERS: {packages - set(LAYERS)}; "
                                     f"in LAYERS but absent: {set(LAYERS) - packages}")


def test_no_core_module_imports_a_higher_layer():
    found = [v for path in core_modules() for v in layer_violations(path)]
    assert not found, "imports against the layering (LAYERS):\n" + "\n".join(found)


@pytest.mark.parametrize("code", [
    "import recallbench.cli",
    "import recallbench.cli.main as m",
    "from recallbench.cli import sweep",
    "from recallbench import cli",
    "def f():\n    from recallbench.cli.sweep import command\n",
    "from ..cli import sweep",
    "from recallbench.runs.store import Store",
    "from recallbench.tasks import mqar",
])
def test_the_layer_check_sees_every_kind_of_import(code):
    """An import of a higher layer (or of a plugin), written any way, is found."""
    law_module = CORE / "law" / "fit.py"
    assert layer_violations(law_module, code), code


@pytest.mark.parametrize("code", [
    "import numpy as np",
    "from recallbench.api.errors import ConfigError",
    "from recallbench import TASKS, ADAPTERS, resolve",
    "from recallbench.law import theory",
    "from .binomial import _nll",
    "from recallbench.harness.metrics import accuracy",
])
def test_the_layer_check_lets_lower_and_own_layers_be(code):
    law_module = CORE / "law" / "fit.py"
    assert layer_violations(law_module, code) == [], code


def _string_literals(tree: ast.AST):
    """Every str constant that is not a docstring."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            yield node


def plugin_words() -> set[str]:
    """Names of the built-in plugins and of the libraries they wrap, less the law's own
    words ("ar", "mqar", "designed" are task families and model kinds of the law as well
    as plugin names: the law may say them)."""
    from recallbench.law import theory

    def plugins(registry):  # the plugin packages' own (a test may have added others)
        return {name: registry.get(name) for name in registry.names()
                if registry.get(name).__module__.startswith(registry.builtin_package)}

    tasks, adapters = plugins(TASKS), plugins(ADAPTERS)
    words = set(tasks) | set(adapters)
    words |= {cls.distribution for cls in adapters.values() if getattr(cls, "distribution", None)}
    return words - set(theory.TASK_FAMILIES) - set(theory.MODEL_KINDS)


def test_plugin_words_are_known():
    """The check below is only as good as its word list: it must hold the built-ins."""
    words = plugin_words()
    assert {"mqar-repeated-keys", "linear-mamba", "mamba", "gla"} <= words
    assert any("mamba" in w and "-" in w for w in words - set(ADAPTERS.names()))


def test_core_names_no_plugin():
    words = plugin_words()
    library_modules = re.compile(r"^(mamba_ssm|fla)(\.|$)")
    found = []
    for path in core_modules():
        tree = ast.parse(path.read_text())
        for node in _string_literals(tree):
            value = node.value.strip()
            if path == DEFAULTS_MODULE and value in ("mqar", "linear-mamba"):
                continue
            if value in words or library_modules.match(value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {value!r}")
    assert not found, "the core names plugins:\n" + "\n".join(found)


# -- citations ---------------------------------------------------------------------------

TOP_DIRS = ("docs", "benchmarks", "sweeps", "tests", "recallbench", "tasks", "adapters",
            "leaderboards", "examples")
_PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*\.(?:md|py|yaml|sh|png|html))\b" % "|".join(TOP_DIRS))
_DOC = re.compile(r"(?<![\w./-])([A-Z][A-Z_]+\.md)\b")
_PLACEHOLDER = re.compile(r"(^|/)[A-Z][A-Z_]*(\.\w+)?(/|$)")  # docs/results/NAME/report.md


def cited_paths(text: str) -> set[str]:
    """Repository files a text names: paths under a top-level folder, and NAME.md files."""
    out = {m.group(1) for m in _PATH.finditer(text) if not _PLACEHOLDER.search(m.group(1))}
    out.update(m.group(1) for m in _DOC.finditer(text))
    return out


def test_cited_paths_finds_what_it_should():
    text = ("see docs/theory.md, OTHER.md and `python benchmarks/bench_train.py`; not "
            "docs/results/NAME/report.md, tests/my-baseline.json or docs/results/<study>/")
    assert cited_paths(text) == {"docs/theory.md", "OTHER.md", "benchmarks/bench_train.py"}


def test_nothing_cites_a_missing_file():
    missing = []
    for path in tracked("*.py", "*.md", "*.yaml", "*.cfg", "*.ini", "*.toml", "*.sh"):
        if path == Path(__file__).resolve():
            continue  # its examples are not citations
        for cited in cited_paths(path.read_text(errors="replace")):
            target = cited.rstrip(".")
            if not (ROOT / target).exists() and not (path.parent / target).exists():
                missing.append(f"{path.relative_to(ROOT)} cites {cited}")
    assert not missing, "\n".join(sorted(missing))


_SECTION = re.compile(r"docs/theory\.md[,:]?\s*(?:§\s*)?[\"'‘“]([A-Z][^\"'’”\n]+)[\"'’”]")


def test_cited_theory_sections_exist():
    """Code and docs cite docs/theory.md by section title: each title must be a heading."""
    headings = {line.lstrip("#").strip() for line in
                (ROOT / "docs" / "theory.md").read_text().splitlines() if line.startswith("#")}
    cited = {}
    for path in tracked("*.py", "*.md", "*.yaml"):
        if path == Path(__file__).resolve():
            continue
        for m in _SECTION.finditer(path.read_text(errors="replace")):
            cited.setdefault(m.group(1), str(path.relative_to(ROOT)))
    assert cited, "no section citations found: the pattern is wrong"
    missing = {title: where for title, where in cited.items() if title not in headings}
    assert not missing, f"cited sections that docs/theory.md lacks: {missing}"


def test_every_package_folder_is_installed():
    """A package folder missing from setup.cfg works in an editable install and is absent
    from a built wheel: list each one."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    roots = {"recallbench": CORE, "recallbench.tasks": ROOT / "tasks",
             "recallbench.adapters": ROOT / "adapters"}
    found = set()
    for name, folder in roots.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder).parts
            found.add(".".join((name, *rel)))
    assert found == listed, f"not listed: {found - listed}; listed but absent: {listed - found}"
