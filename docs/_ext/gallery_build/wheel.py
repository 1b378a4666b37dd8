"""The package's wheel as a site download, and the one install line that makes a downloaded page run.

The examples import ``cudnn_guide``, which is not on the package registry: the site builds the
wheel (:func:`build_wheel`, from a copy of the package so the checkout stays clean) and serves it
beside the pages. Each example page shows :func:`install_line` above its download box
(:func:`install_rst`), and each downloadable notebook starts with a cell that runs it
(:func:`add_install_cell`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["wheel_name", "install_line", "install_rst", "build_wheel", "add_install_cell"]

FOOTER_LABEL = ".. _sphx_glr_download_"


def wheel_name(root: Path) -> str:
    """``cudnn_guide-<version>-py3-none-any.whl`` from ``pyproject.toml``.

    Example
    -------
    >>> wheel_name(Path("."))
    'cudnn_guide-0.1.0-py3-none-any.whl'
    """
    text = (Path(root) / "pyproject.toml").read_text(encoding="utf-8")
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]  # the table, up to the next one
    name, version = (re.search(rf'^{key}\s*=\s*"([^"]+)"', project, re.M).group(1) for key in ("name", "version"))
    return f"{name.replace('-', '_')}-{version}-py3-none-any.whl"


def install_line(wheel: str) -> str:
    """The pip command that installs the downloaded wheel with what the pages import.

    Example
    -------
    >>> install_line("cudnn_guide-0.1.0-py3-none-any.whl")
    'pip install "./cudnn_guide-0.1.0-py3-none-any.whl[examples]"'
    """
    return f'pip install "./{wheel}[examples]"'


def install_rst(rst: str, wheel: str, depth: int = 1) -> str:
    """``rst`` with a "to run this page" note inserted above sphinx-gallery's download box.

    ``depth`` is how many folders the page sits below the site's root (the wheel is at the root).
    A skipped page gets it above its script download; a page with neither is returned unchanged.

    Example
    -------
    >>> "pip install" in install_rst(".. _sphx_glr_download_x:\\n", "w.whl")
    True
    """
    at = rst.find(FOOTER_LABEL)
    if at < 0:  # a page recorded as skipped has its own download line at the end
        at = rst.find(":download:`Download the script")
    if at < 0:
        return rst
    link = "../" * depth + wheel
    note = (
        ".. admonition:: Run this page yourself\n   :class: cg-install\n\n"
        f"   The script and notebook import ``cudnn_guide``: download `{wheel} <{link}>`__, then\n\n"
        f"   .. code-block:: bash\n\n      {install_line(wheel)}\n\n"
        "   It brings cuDNN Frontend, PyTorch, NumPy, matplotlib and pandas; the ``examples`` extra adds\n"
        "   FlashAttention-4, the CuTe DSL and cuda-python for the pages that use them. A CUDA GPU and a\n"
        "   CUDA build of PyTorch are needed to run the pages.\n\n"
    )
    return rst[:at] + note + rst[at:]


def build_wheel(root: Path, dest: Path) -> Path:
    """Build the package's wheel into ``dest`` from a temporary copy (no build isolation, no network).

    Raises
    ------
    RuntimeError
        pip could not build it, with pip's last lines and the fix.
    """
    root, dest = Path(root), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cudnn-guide-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (root / name).exists():
                shutil.copy(root / name, src / name)
        shutil.copytree(root / "cudnn_guide", src / "cudnn_guide", ignore=shutil.ignore_patterns("__pycache__"))
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dest), "."]
        done = subprocess.run(cmd, cwd=src, capture_output=True, text=True, check=False)
    wheel = dest / wheel_name(root)
    if done.returncode or not wheel.exists():
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise RuntimeError(
            f"could not build {wheel.name} for the site's download ({tail}); "
            "fix: pip install 'setuptools>=68' into the docs environment"
        )
    return wheel


def add_install_cell(notebook: Path, wheel: str) -> bool:
    """Put a first code cell that installs the wheel into a downloadable notebook (once).

    Returns whether the notebook changed.
    """
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    line = f"%{install_line(wheel)}"
    cells = nb.get("cells", [])
    if cells and line in "".join(cells[0].get("source", [])):
        return False
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": [f"# Download {wheel} from the site next to this notebook, then:\n", line],
    }
    nb["cells"] = [cell, *cells]
    notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
    return True
