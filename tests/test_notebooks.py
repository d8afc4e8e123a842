import jax; jax.config.update("jax_enable_x64", True)  # noqa: E702

"""Every notebook in notebooks/ runs top to bottom: its code cells are executed in order in
one fresh namespace (Agg backend, inside a temporary directory) and must raise nothing (the
asserts in the notebooks included).

The tests set ``JAXHC_NOTEBOOK_SMOKE=1``: a notebook whose full run is dominated by run time
rather than compilation (jets, crossclustering) reads it in its first code cell and picks
smaller sizes (fewer jets, samples and NUTS steps; a smaller synthetic table), running the
same code. The committed outputs are those of the full run."""
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def _code_cells(path: Path):
    nb = json.loads(path.read_text())
    assert nb.get("nbformat") == 4, f"{path.name}: expected nbformat 4"
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        assert not any(line.lstrip().startswith(("%", "!")) for line in src.splitlines()), (
            f"{path.name}: IPython magics / shell escapes cannot run outside Jupyter"
        )
        cells.append(src)
    return cells


def test_notebooks_found():
    assert NOTEBOOKS, "no notebooks in notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("JAXHC_NOTEBOOK_SMOKE", "1")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    try:
        for i, src in enumerate(_code_cells(path)):
            exec(compile(src, f"{path.name}[cell {i}]", "exec"), namespace)
    finally:
        plt.close("all")
