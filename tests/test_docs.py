"""The documentation runs: its commands work, its links resolve, the README stays short.

Convention for commands the docs promise to work: a fenced block whose info string is

    ```bash runnable          run by the default test run (keep it to a few seconds)
    ```bash runnable slow     trains for longer: run only under `pytest -m slow`

in README.md or docs/*.md is run by this file with ``bash -e -o pipefail``, in a fresh
temporary folder (where ``examples``, ``sweeps``, ``leaderboards``, ``benchmarks`` and
``docs`` link to the repository's own, read only), with the folder of this interpreter
first on PATH, so ``recallbench`` and ``python`` are this environment's. It must exit 0.
A block is written to be truthful and small at once: the tiny settings are in the block
itself (``--set train.max_steps=60 ...``), so what the reader copies is what is tested.
Other fences (```bash, ```yaml, ```python, bare ```) are not run.

Also checked: every relative link and image in README.md and docs/*.md names a file that
exists (and a heading that exists, for a #anchor into a Markdown file), every guide under
docs/ is one click from README.md, README.md keeps the two commands CI and newcomers rely
on, README.md has at most 200 lines, and docs/plugins.md shows examples/minimal_adapter.py
verbatim.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
LINKED_DIRS = ("examples", "sweeps", "leaderboards", "benchmarks", "docs")
MAX_README_LINES = 200
FENCE = re.compile(r"^(```+|~~~+)(.*)$")


def fenced_blocks(text: str):
    """(info string, first line number, body) of every fenced block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start, body = m.group(1), m.group(2).strip(), i + 1, []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        yield info, start, "\n".join(body) + "\n"


def prose(text: str) -> str:
    """``text`` without its fenced blocks and inline code: where links and headings live."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and line.startswith(fence):
            fence = None
        elif fence is None:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def runnable_blocks():
    params = []
    for path in DOCS:
        for info, line, body in fenced_blocks(path.read_text()):
            words = info.split()
            if len(words) >= 2 and words[0] == "bash" and words[1] == "runnable":
                marks = [pytest.mark.slow] if "slow" in words[2:] else []
                params.append(pytest.param(body, id=f"{path.relative_to(ROOT)}:{line}", marks=marks))
    return params


BLOCKS = runnable_blocks()


def test_the_docs_have_runnable_blocks_of_both_kinds():
    slow = [p for p in BLOCKS if p.marks]
    assert slow and len(slow) < len(BLOCKS), "expected quick and slow runnable blocks"


@pytest.mark.parametrize("body", BLOCKS)
def test_runnable_block_exits_0(body, tmp_path):
    for name in LINKED_DIRS:
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               COLUMNS="100")
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (f"exit status {done.returncode}\n--- block\n{body}--- stdout\n"
                                  f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")


# -- links --------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in prose(path.read_text()).splitlines()
            if re.match(r"#{1,6} ", line)}


def test_slug_is_githubs():
    assert slug("Top-1 against top-k: recallbench topk") == "top-1-against-top-k-recallbench-topk"
    assert slug("The paper's studies") == "the-papers-studies"
    assert slug("I want to…") == "i-want-to"


def test_every_relative_link_resolves():
    broken = []
    for path in DOCS:
        for target in LINK.findall(prose(path.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(ROOT)} -> {target}"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where}: no such heading")
    assert not broken, "\n".join(broken)


def test_every_guide_is_one_click_from_the_readme():
    readme = prose((ROOT / "README.md").read_text())
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in LINK.findall(readme)}
    missing = [p.name for p in DOCS if p.parent.name == "docs" and p.resolve() not in linked]
    assert not missing, f"guides README.md does not link: {missing}"


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= MAX_README_LINES
    blocks = [body for _, _, body in fenced_blocks(text)]
    # .ci/run runs the second verbatim; the first is the main job on a fresh machine
    assert "bash install.sh && .venv/bin/recallbench run\n" in blocks
    assert "bash install.sh && .venv/bin/python -m pytest\n" in blocks


def test_plugins_guide_shows_the_example_verbatim():
    example = (ROOT / "examples" / "minimal_adapter.py").read_text()
    blocks = [body for info, _, body in fenced_blocks((ROOT / "docs" / "plugins.md").read_text())
              if info == "python"]
    assert example in blocks
