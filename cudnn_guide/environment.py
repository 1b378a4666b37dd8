"""Describe where the numbers come from: the GPU, its software stack, and libcudnn.

Nothing here needs a GPU to import. :func:`collect` needs one; :func:`~cudnn_guide.libcudnn.find_libcudnn` does not.

The environment record is what every page prints under its title and what every JSON record
carries, so that a number is never separated from the machine that produced it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from cudnn_guide import collector
from cudnn_guide.errors import CapabilityError, NoGPUError
from cudnn_guide.libcudnn import find_libcudnn, loaded_libcudnn, require_cudnn

__all__ = ["require_sm", "EnvironmentRecord", "collect", "version_string"]

_REPO_ROOT = Path(__file__).resolve().parent.parent


def require_gpu(what: str = "this operation") -> None:
    """Raise :class:`~cudnn_guide.errors.NoGPUError` unless PyTorch sees a CUDA GPU.

    Parameters
    ----------
    what
        The operation, named in the error.

    Raises
    ------
    NoGPUError
        PyTorch sees no CUDA GPU.

    Example
    -------
    >>> require_gpu('my benchmark')  # NoGPUError without a CUDA GPU
    """
    import torch

    if not torch.cuda.is_available():
        raise NoGPUError(what)


def require_sm(minimum: tuple[int, int], feature: str) -> None:
    """Raise :class:`~cudnn_guide.errors.CapabilityError` unless the GPU's SM version is high enough.

    Parameters
    ----------
    minimum
        ``(major, minor)`` compute capability.
    feature
        What needs it, named in the error.

    Raises
    ------
    NoGPUError
        No CUDA GPU.
    CapabilityError
        The GPU's SM version is below ``minimum``.

    Example
    -------
    >>> require_sm((9, 0), "FP8 SDPA")
    """
    import torch

    require_gpu(feature)
    found = torch.cuda.get_device_capability()
    if tuple(found) < tuple(minimum):
        raise CapabilityError(
            feature,
            f"SM {minimum[0]}.{minimum[1]} or newer",
            f"SM {found[0]}.{found[1]} ({torch.cuda.get_device_name()})",
        )


# ---------------------------------------------------------------------------------------------
# The environment record
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EnvironmentRecord:
    """Everything a reader needs to know about where a number was measured.

    Serialises to JSON (:meth:`to_dict`), renders as a one-line stamp (:meth:`stamp`) and as an
    HTML table in a gallery page (``_repr_html_``).

    Example
    -------
    >>> env = collect()
    >>> print(env.stamp())
    >>> json_text = env.to_json()
    """

    gpu: str
    sm: str
    sm_count: int
    memory_gib: float
    l2_mib: float
    driver: str
    cuda: str
    torch: str
    cudnn_backend: str
    cudnn_frontend: str
    libcudnn: str
    python: str
    platform: str
    commit: str
    date_utc: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EnvironmentRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def stamp(self) -> str:
        """One line: ``Measured on <GPU> · driver · CUDA · cuDNN · frontend · torch · commit · date``."""
        return (
            f"Measured on {self.gpu} (SM {self.sm}) · driver {self.driver} · CUDA {self.cuda} · "
            f"cuDNN {self.cudnn_backend} · frontend {self.cudnn_frontend} · torch {self.torch} · "
            f"commit {self.commit} · {self.date_utc}"
        )

    def rows(self) -> list[tuple[str, str]]:
        labels = {
            "gpu": "GPU",
            "sm": "SM version",
            "sm_count": "SMs",
            "memory_gib": "Memory (GiB)",
            "l2_mib": "L2 cache (MiB)",
            "driver": "Driver",
            "cuda": "CUDA (torch build)",
            "torch": "PyTorch",
            "cudnn_backend": "cuDNN backend",
            "cudnn_frontend": "cuDNN Frontend",
            "libcudnn": "libcudnn loaded",
            "python": "Python",
            "platform": "Platform",
            "commit": "cudnn-guide commit",
            "date_utc": "Date (UTC)",
        }
        return [(labels[k], str(v)) for k, v in self.to_dict().items()]

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.rows())
        return "\n".join(f"{k:<{width}}  {v}" for k, v in self.rows())

    def _repr_html_(self) -> str:
        import html

        body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in self.rows())
        return f'<table class="cg-env-table">{body}</table>'


def git_commit() -> str:
    """The cudnn-guide commit being measured.

    ``CUDNN_GUIDE_COMMIT`` wins (a GPU builder that received a copy of the tree without ``.git``);
    otherwise ``git rev-parse``. A ``+dirty`` suffix marks uncommitted changes to the code.

    Returns
    -------
    str
        A 12-character commit, ``+dirty`` if the code has uncommitted changes, or ``unknown``.

    Example
    -------
    >>> print(git_commit())  # e.g. 'b7d79cf50f67' or 'b7d79cf50f67+dirty'
    """
    env = os.environ.get("CUDNN_GUIDE_COMMIT")
    if env:
        return env
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=_REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs/auto_examples"],
            cwd=_REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
        if out:
            return out.splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        for token in text.split():
            if token.count(".") >= 1 and token.replace(".", "").isdigit():
                return token
    except OSError:
        pass
    return "unknown"


def version_string(v: int) -> str:
    """A cuDNN version number as cuDNN names it: ``91900`` → ``"9.19.0"``.

    Parameters
    ----------
    v
        The number ``cudnn.backend_version()`` or ``torch.backends.cudnn.version()`` returns.

    Returns
    -------
    str
        Major, minor and patch, dotted.

    Example
    -------
    >>> version_string(91900)
    '9.19.0'
    """
    return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"


def collect() -> EnvironmentRecord:
    """Measure the environment of this process: GPU, driver, CUDA, cuDNN, versions, commit, date.

    The running example's record (:mod:`cudnn_guide.report.records`) keeps it.

    Returns
    -------
    EnvironmentRecord
        The environment of this process.

    Raises
    ------
    NoGPUError
        Without a CUDA GPU.
    CudnnLibraryError
        If libcudnn cannot be reached.

    Example
    -------
    >>> env = collect()
    >>> print(env.stamp())
    """
    import cudnn
    import torch

    require_gpu("collecting the GPU environment")
    backend = require_cudnn()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = getattr(props, "L2_cache_size", 0)
    env = EnvironmentRecord(
        gpu=props.name,
        sm=f"{props.major}.{props.minor}",
        sm_count=int(props.multi_processor_count),
        memory_gib=round(props.total_memory / 2**30, 1),
        l2_mib=round(l2 / 2**20, 1),
        driver=_driver_version(),
        cuda=str(torch.version.cuda),
        torch=torch.__version__,
        cudnn_backend=version_string(backend),
        cudnn_frontend=cudnn.__version__,
        libcudnn=loaded_libcudnn() or find_libcudnn().found or "unknown",
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        commit=git_commit(),
        date_utc=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    collector.add_environment(env)  # the running example's record stores it
    return env


def _main() -> None:  # pragma: no cover - thin CLI
    print(find_libcudnn().explain())
    try:
        print(collect().to_json())
    except Exception as exc:
        print(f"\n{type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":  # pragma: no cover
    _main()
