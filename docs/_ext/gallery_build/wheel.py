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

__all__ = [
    "wheel_name",
    "install_line",
    "install_rst",
    "build_wheel",
    "WheelBuild",
    "start_wheel_build",
    "add_install_cell",
]

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
    return start_wheel_build(root, dest).result()


class WheelBuild:
    """A wheel build running in the background (:func:`start_wheel_build`); :meth:`result` waits for it.

    Example
    -------
    >>> pending = start_wheel_build(Path("."), Path("docs/_build/html"))
    >>> ...  # the site is built meanwhile
    >>> pending.result().name
    'cudnn_guide-0.1.0-py3-none-any.whl'
    """

    def __init__(self, root: Path, dest: Path) -> None:
        self.root, self.dest = Path(root), Path(dest)
        self.dest.mkdir(parents=True, exist_ok=True)
        self._tmp = tempfile.TemporaryDirectory(prefix="cudnn-guide-wheel-")
        src = Path(self._tmp.name) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (self.root / name).exists():
                shutil.copy(self.root / name, src / name)
        shutil.copytree(self.root / "cudnn_guide", src / "cudnn_guide", ignore=shutil.ignore_patterns("__pycache__"))
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(self.dest),
            ".",
        ]
        # pip's output goes to a file, not a pipe: nothing needs reading while the build goes on
        self._log = Path(self._tmp.name) / "pip.log"
        with open(self._log, "w", encoding="utf-8") as log:
            self._proc = subprocess.Popen(cmd, cwd=src, stdout=log, stderr=subprocess.STDOUT)

    def result(self) -> Path:
        """Wait for pip; the wheel's path.

        Raises
        ------
        RuntimeError
            pip could not build it, with pip's last lines and the fix.
        """
        try:
            code = self._proc.wait()
            output = self._log.read_text(encoding="utf-8", errors="replace")
        finally:
            self._tmp.cleanup()
        wheel = self.dest / wheel_name(self.root)
        if code or not wheel.exists():
            tail = " | ".join(output.strip().splitlines()[-3:])
            raise RuntimeError(
                f"could not build {wheel.name} for the site's download ({tail}); "
                "fix: pip install 'setuptools>=68' into the docs environment"
            )
        return wheel

    def cancel(self) -> None:
        """Stop pip (a build that failed needs no wheel) and remove the temporary copy."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._tmp.cleanup()


def start_wheel_build(root: Path, dest: Path) -> WheelBuild:
    """Start :func:`build_wheel` in a pip process of its own and return at once.

    The docs build starts it when the builder is ready and collects it when the build finishes
    (:func:`gallery_build.hooks.connect`): pip runs while Sphinx reads and writes the pages, not
    after them. The wheel is the same file :func:`build_wheel` makes.

    Parameters
    ----------
    root
        The repository (``pyproject.toml`` and ``cudnn_guide/``).
    dest
        Where the wheel goes.

    Returns
    -------
    WheelBuild
        Its :meth:`~WheelBuild.result` waits and returns the wheel's path, or raises
        :class:`RuntimeError` naming pip's last lines.

    Example
    -------
    >>> pending = start_wheel_build(Path("."), Path("docs/_build/html"))
    >>> wheel = pending.result()
    """
    return WheelBuild(root, dest)


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
