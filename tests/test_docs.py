import jax

jax.config.update("jax_enable_x64", True)

"""Docs that cannot rot: the API reference covers every public name, the code of README.md
and of the guides runs, the notebooks carry their outputs.

**Reference.** Every public module (no underscore in its dotted name) that defines
``__all__`` has a ``::: module`` block on a page of ``docs/reference/`` (written by
``docs/gen_reference.py``). Each name of its ``__all__`` is declared there once: as a member
of the block (rendered in full), as a link ``- [`name`][path.of.entry]`` to the entry where
it is rendered (a re-export), or as ``- `name`: `other.package.path`, re-exported from
another package``. The test reads the pages as text (no site build) and fails listing the
names no page declares and the declared names no ``__all__`` holds. A second test checks
what the site build is told not to check (``warn_unknown_params: false`` in mkdocs.yml,
because the docstrings document parameters in groups, ``a, b: ...``): every name in the
``Args:`` section of a documented function or class is one of its parameters.

**Code blocks.** The pages are README.md, ``docs/**/*.md`` (the reference pages have no
code) and ``benchmarks/README.md`` (the performance page); the benchmark notes are history
and are not checked. The rule, by the block's info string:

* ``python``: run. The blocks of one page run in order in one namespace, in a temporary
  folder, with float64 on (as above) and matplotlib's Agg backend; any exception fails the
  page. Sizes in the pages are small on purpose.
* ``text``: not code (a file listing); not run.
* ``bash`` or no info string: each line is a command, ``&&`` chains split, comments
  dropped, and each command must match one of these rules (else the test fails: a new kind
  of command needs a rule here):

  - ``jaxhc ...`` / ``python -m jaxhc ...``: parsed by the command line's own parser
    (``jaxhc.cli.build_parser``), so a renamed command or option fails; and run, in
    process (``jaxhc.cli.main``), in the page's temporary folder, which holds the small
    inputs the pages name (``points.csv``: 60 rows, 4 columns, 3 Gaussian clusters, and a ``label``
    column; ``jets.json``: 20 Ginkgo jets of 4-5 leaves), exit status 0 required. The one
    exception is a command on an install line (next rule).
  - ``pip install ...``: every extra it names exists in pyproject.toml. Install lines are
    run by ``.ci/run`` and by ``check-readme-fresh`` (which replays the README's first
    install line, with its ``jaxhc demo``, in a fresh clone), not here; so the README's test
    command must be, character for character, the last line of ``.ci/run``, its docs build
    command must be a line of ``.ci/run``, and its first install line must run the demo.
  - ``python benchmarks/NAME.py ...``: the script exists and defines every ``--option``
    the line passes (a string literal in the script); benchmarks take minutes to hours and
    are not run here.
  - ``bash benchmarks/NAME.sh``: the script exists and ``bash -n`` parses it (it runs on a
    GPU machine, not here).
  - ``python docs/gen_reference.py``: the script exists (its output is checked above).
  - ``mkdocs ...``, ``ruff ...``, ``python -m pytest ...``: a command of ``.ci/run``.

**Notebooks.** The site renders ``notebooks/*.ipynb`` without executing them, so each must
carry the outputs of a top-to-bottom run: every code cell has an execution count, the
counts are 1, 2, 3, ... in order, no output is an error, and the notebook has outputs.
``tests/test_notebooks.py`` runs the notebooks themselves (at smoke size).
"""

import importlib
import inspect
import json
import os
import pkgutil
import re
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest

import jaxhc
from jaxhc.cli import build_parser
from jaxhc.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
PAGES = sorted(
    [ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
    + [p for p in (ROOT / "docs").rglob("*.md") if REFERENCE not in p.parents and not p.is_symlink()]
)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


# ---------------------------------------------------------------------------------------
# the API reference
# ---------------------------------------------------------------------------------------
def _public_all() -> dict:
    """``{module: __all__}`` of every public module that defines one."""
    found = {"jaxhc": list(jaxhc.__all__)}
    for info in pkgutil.walk_packages(jaxhc.__path__, "jaxhc."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        mod = importlib.import_module(info.name)
        if hasattr(mod, "__all__"):
            found[info.name] = list(mod.__all__)
    return found


BLOCK = re.compile(r"^::: ([\w.]+)\s*$")
MEMBER = re.compile(r"^        - (\w+)\s*$")
LINK = re.compile(r"^- \[`(\w+)`\]\[([\w.]+)\]\s*$")
FOREIGN = re.compile(r"^- `(\w+)`: `([\w.]+)`, re-exported from another package\s*$")


def _reference_declarations():
    """``(blocks, full, links, foreign)`` read from the reference pages: the modules with a
    block, ``{(module, name)}`` rendered in full, ``{(module, name): entry}`` and
    ``{(module, name): foreign path}``."""
    blocks, full, links, foreign = [], set(), {}, {}
    for page in sorted(REFERENCE.glob("*.md")):
        module = None
        for line in page.read_text().splitlines():
            if m := BLOCK.match(line):
                module = m.group(1)
                blocks.append(module)
            elif module and (m := MEMBER.match(line)):
                full.add((module, m.group(1)))
            elif module and (m := LINK.match(line)):
                links[(module, m.group(1))] = m.group(2)
            elif module and (m := FOREIGN.match(line)):
                foreign[(module, m.group(1))] = m.group(2)
    return blocks, full, links, foreign


def test_reference_declares_every_public_name():
    public = _public_all()
    blocks, full, links, foreign = _reference_declarations()
    assert len(blocks) == len(set(blocks)), "a module has two blocks in docs/reference"
    exported = {(m, n) for m, names in public.items() for n in names}
    declared = [*full, *links, *foreign]
    assert len(declared) == len(set(declared)), "a name is declared twice in docs/reference"
    missing = sorted(exported - set(declared))
    extra = sorted(set(declared) - exported)
    hint = " (run `python docs/gen_reference.py`)"
    assert not missing, f"public names without a reference entry{hint}: " + ", ".join(f"{m}.{n}" for m, n in missing)
    assert not extra, f"reference entries for names in no __all__{hint}: " + ", ".join(f"{m}.{n}" for m, n in extra)
    assert sorted(blocks) == sorted(public), f"modules with a block != public modules with __all__{hint}"
    # a link leads to a full entry or a module's block, and names the object the module exports
    entries = {f"{m}.{n}" for m, n in full} | set(blocks)
    for (module, name), target in links.items():
        assert target in entries, f"{module}.{name} links to {target}, which no page renders"
        if target in blocks:
            obj = importlib.import_module(target)
        else:
            parent, attr = target.rsplit(".", 1)
            obj = getattr(importlib.import_module(parent), attr)
        assert getattr(importlib.import_module(module), name) is obj, f"{module}.{name} is not {target}"
    for (module, name), path in foreign.items():
        assert not path.startswith("jaxhc."), f"{module}.{name}: {path} is ours, it needs an entry"


def _args_section(doc: str) -> list:
    """The parameter names of a Google-style ``Args:`` section (groups split on commas)."""
    lines = inspect.cleandoc(doc).splitlines()
    names = []
    for i, line in enumerate(lines):
        if line.strip() not in ("Args:", "Arguments:", "Parameters:"):
            continue
        base = len(line) - len(line.lstrip())
        item = None
        for body in lines[i + 1 :]:
            if not body.strip():
                continue
            indent = len(body) - len(body.lstrip())
            if indent <= base:
                break
            if item is None:
                item = indent
            if indent == item and ":" in body:
                head = body.split(":", 1)[0].strip()
                head = re.sub(r"\s*\(.*\)$", "", head)  # "x (array)": a type in brackets
                names += [n.strip().lstrip("*") for n in head.split(",") if n.strip()]
    return names


def test_documented_parameters_are_in_signatures():
    _, full, _, _ = _reference_declarations()
    problems = []
    for module, name in sorted(full):
        obj = getattr(importlib.import_module(module), name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj) or callable(obj)) or not obj.__doc__:
            continue
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            continue
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            continue
        for arg in _args_section(obj.__doc__):
            if arg not in params:
                problems.append(f"{module}.{name}: {arg!r}")
    assert not problems, "documented parameters not in the signature: " + "; ".join(problems)


# ---------------------------------------------------------------------------------------
# code blocks
# ---------------------------------------------------------------------------------------
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


def _blocks(page: Path):
    """``[(info string, first line number, source)]`` of the fenced blocks of a page."""
    out, info, start, buf, indent = [], None, 0, [], ""
    for i, line in enumerate(page.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if info is None and m:
            indent, info, start, buf = m.group(1), m.group(2), i + 1, []
        elif info is not None and line.strip() == "```":
            out.append((info, start, "\n".join(buf)))
            info = None
        elif info is not None:
            buf.append(line[len(indent) :] if line.startswith(indent) else line)
    assert info is None, f"{page}: a code block is not closed"
    return out


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_pages_found():
    names = {_rel(p) for p in PAGES}
    assert {"README.md", "benchmarks/README.md", "docs/index.md", "docs/guides/getting-started.md"} <= names
    known = {"python", "text", "bash", ""}
    for page in PAGES:
        for info, line, _ in _blocks(page):
            assert info in known, f"{_rel(page)}:{line}: code block of unknown kind {info!r}"


PY_PAGES = [p for p in PAGES if any(info == "python" for info, _, _ in _blocks(p))]


@pytest.mark.parametrize("page", PY_PAGES, ids=[_rel(p) for p in PY_PAGES])
def test_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    namespace = {"__name__": "__main__"}
    try:
        for info, line, src in _blocks(page):
            if info == "python":
                # line numbers in tracebacks are the page's own
                code = compile("\n" * (line - 1) + src, str(page), "exec")
                exec(code, namespace)
    finally:
        plt.close("all")


def _ci_lines() -> list:
    return [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip()]


def _extras() -> set:
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^(\w+) = \[", section, re.M))


def _commands(src: str):
    """The commands of a shell block: comments and prompts dropped, ``&&`` chains split."""
    for raw in src.splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"\s+#.*$", "", line)
        yield line, [part.strip() for part in line.split("&&")]


def _write_inputs(folder: Path) -> None:
    """The small inputs the pages' commands name."""
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 20)
    X = rng.normal(size=(60, 4)) + 6.0 * np.eye(4)[y]  # the shape of the guides' data and the quick demo's
    rows = ["a,b,c,d,label"] + [",".join(repr(float(v)) for v in x) + f",{c}" for x, c in zip(X, y)]
    (folder / "points.csv").write_text("\n".join(rows) + "\n")
    jets = json.loads((ROOT / "tests" / "data" / "ginkgo_jets_reference.json").read_text())
    (folder / "jets.json").write_text(json.dumps([{"leaves": j["leaves"]} for j in jets]))


def _check_benchmark(cmd: list, where: str) -> None:
    script = ROOT / cmd[1]
    assert script.is_file(), f"{where}: no script {cmd[1]}"
    src = script.read_text()
    for arg in cmd[2:]:
        if arg.startswith("--"):
            option = arg.split("=", 1)[0]
            assert f'"{option}"' in src, f"{where}: {cmd[1]} has no option {option}"


SHELL_PAGES = [p for p in PAGES if any(info in ("bash", "") for info, _, _ in _blocks(p))]


@pytest.mark.parametrize("page", SHELL_PAGES, ids=[_rel(p) for p in SHELL_PAGES])
def test_shell_commands(page, tmp_path, monkeypatch):
    ci = _ci_lines()
    extras = _extras()
    parser = build_parser()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    _write_inputs(tmp_path)
    ran = 0
    for info, start, src in _blocks(page):
        if info not in ("bash", ""):
            continue
        for line, parts in _commands(src):
            where = f"{_rel(page)}:{start}: {line}"
            install = any(p.startswith("pip install") for p in parts)
            for part in parts:
                cmd = shlex.split(part)
                if cmd[:2] == ["pip", "install"]:
                    named = re.findall(r"\[([\w,]+)\]", part)
                    for group in named:
                        assert set(group.split(",")) <= extras, f"{where}: an extra not in pyproject.toml"
                elif cmd[0] == "jaxhc" or cmd[:3] == ["python", "-m", "jaxhc"]:
                    argv = cmd[1:] if cmd[0] == "jaxhc" else cmd[3:]
                    parser.parse_args(argv)  # a renamed command or option exits here
                    if not install:
                        assert cli_main(argv) == 0, where
                        ran += 1
                elif cmd[:2] == ["python", "docs/gen_reference.py"]:
                    assert (ROOT / cmd[1]).is_file(), where
                elif cmd[0] == "bash" and len(cmd) == 2 and re.fullmatch(r"benchmarks/\w+\.sh", cmd[1]):
                    assert (ROOT / cmd[1]).is_file(), where
                    assert subprocess.run(["bash", "-n", str(ROOT / cmd[1])]).returncode == 0, f"{where}: bash -n"
                elif cmd[0] == "python" and len(cmd) > 1 and cmd[1].startswith("benchmarks/"):
                    _check_benchmark(cmd, where)
                elif cmd[0] in ("mkdocs", "ruff") or cmd[:3] == ["python", "-m", "pytest"]:
                    assert any(part in c for c in ci), f"{where}: not a command of .ci/run"
                else:
                    raise AssertionError(f"{where}: no rule for this command (see this module's docstring)")
    if page.name == "cli.md":
        assert ran >= 3, "the command-line guide should run its commands"


def test_readme_commands_are_what_ci_and_check_readme_fresh_run():
    readme = ROOT / "README.md"
    shell = [line for info, _, src in _blocks(readme) if info in ("bash", "") for line, _ in _commands(src)]
    installs = [line for line in shell if line.startswith("pip install")]
    assert installs and re.search(r"(^|&& )(python -m )?jaxhc demo", installs[0]), (
        "check-readme-fresh replays the README's first install line and its `jaxhc demo`"
    )
    tests = [line for line in shell if "pytest" in line]
    assert tests == [_ci_lines()[-1]], "the README's test command must be the last line of .ci/run"
    docs = [line for line in shell if "mkdocs build" in line]
    assert len(docs) == 1 and docs[0] in _ci_lines(), "the README's docs build command must be a line of .ci/run"
    assert "--strict" in docs[0]


# ---------------------------------------------------------------------------------------
# notebooks
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_carries_the_outputs_of_a_full_run(path):
    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for c in cells]
    assert counts == list(range(1, len(cells) + 1)), f"{path.name}: execution counts {counts} (run it top to bottom)"
    outputs = [o for c in cells for o in c.get("outputs", [])]
    assert outputs, f"{path.name}: no outputs stored"
    errors = [o.get("ename") for o in outputs if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: stored errors {errors}"


def test_docs_notebooks_are_the_notebooks():
    link = ROOT / "docs" / "notebooks"
    assert link.is_symlink() and os.readlink(link) == "../notebooks", "docs/notebooks must link to ../notebooks"
