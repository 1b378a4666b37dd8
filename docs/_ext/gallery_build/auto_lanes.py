"""How many pages each GPU records at once when nobody says: the recorder's default lanes.

``nox -s docs`` on a GPU names no ``--lanes``. One page at a time is safe anywhere; every recording of
the site since 3a6f174 used lanes that take turns on the GPU (:mod:`gallery_build.gpu_turns`; three,
some four, d00af07's five), on an H200, with the site's verdicts and intervals holding, and the last
whole-site recordings one page at a time (612c244 and the four before it) took 1106-1327 s of recorder
time to the three-lane ones' 450-778 s and d00af07's five-lane ones' 357-389 s
(``docs/data/recording_benchmark.json``; the code changed between them too).
Lanes keep several pages' tensors on the GPU at once and give each page a share of the CPU cores, so
the recorder chooses them by itself only on a machine like the one they were measured on:

* every GPU it records on has at least :data:`MIN_GPU_GIB` of memory (the H200 has 141 GB);
* the host has :data:`CORES_PER_LANE` cores for each lane of each GPU;
* there are pages enough: never more lanes on a GPU than pages for it.

Anything else, including a machine where ``nvidia-smi`` does not answer, records one page at a time.
``--lanes N`` or ``CUDNN_GUIDE_LANES=N`` (``1`` included) always wins, and the recorder prints the
choice and how to change it in one line.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

__all__ = ["AUTO_LANES", "MIN_GPU_GIB", "CORES_PER_LANE", "choose", "gpu_memory_gib", "host_cores"]

AUTO_LANES = 5
"""Lanes per GPU on a machine that qualifies: five from c61db7f on. d00af07's two five-lane recordings (``--lanes 5``)
of one lease took 389 and 357 s of recorder time, a four-lane one of the same lease 498 s on a slower host; the
three-lane recordings from 8194830 to 688f411 took 450-515 s in other leases, with other code (the measurement
studies' "Five lanes"). So three against five lanes was never raced in one lease: five is the default because both
five-lane recordings met the site's reproducibility bars and came in under the 420 s aim, not because an A/B
measured its gain. The site's recordings from 3a6f174 to 688f411 used three."""
MIN_GPU_GIB = 120.0
"""The least memory (GiB) of each GPU for lanes chosen by themselves: above an 80 GB card, under an H200's 140 GiB."""
CORES_PER_LANE = 3
"""Host cores each lane needs: five lanes on the H200 builder's 16 cores have three or four each, as in d00af07's
five-lane recordings (three lanes, five or six cores each, were the default before c61db7f)."""

HOW_TO_CHANGE = "--lanes N or CUDNN_GUIDE_LANES=N sets it"


def gpu_memory_gib(visible: str | None = None, order: str | None = None) -> list[float]:
    """Each GPU's memory in GiB, as ``nvidia-smi`` reports it, for the GPUs CUDA will use.

    Parameters
    ----------
    visible
        ``CUDA_VISIBLE_DEVICES`` (default: the environment's). Indices keep those GPUs; an empty value means
        none; UUIDs or MIG names give no reading.
    order
        ``CUDA_DEVICE_ORDER`` (default: the environment's). ``nvidia-smi`` numbers GPUs in PCI order, CUDA by
        default fastest first: unless it is ``PCI_BUS_ID``, an index may name another GPU, so each visible GPU
        is given the smallest memory of all.

    Returns
    -------
    list[float]
        One value per GPU; empty when ``nvidia-smi`` is missing, fails, prints what cannot be read, a GPU is
        split by MIG (CUDA sees slices, ``nvidia-smi`` the whole), or ``visible`` names GPUs other than by index.

    Example
    -------
    >>> gpu_memory_gib()  # an H200
    [140.4]
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    order = os.environ.get("CUDA_DEVICE_ORDER", "") if order is None else order
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.total,mig.mode.current", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    memory: dict[int, float] = {}
    for line in done.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit() or parts[2] == "Enabled":
            return []
        try:
            memory[int(parts[0])] = float(parts[1]) / 1024  # MiB
        except ValueError:  # "[N/A]" and the like
            return []
    if visible is None:
        return [memory[i] for i in sorted(memory)]
    chosen = [v.strip() for v in visible.split(",") if v.strip()]
    if not all(v.isdigit() and int(v) in memory for v in chosen):
        return []
    if order.strip() != "PCI_BUS_ID":
        return [min(memory.values())] * len(chosen)
    return [memory[int(v)] for v in chosen]


def host_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def choose(gpu_gib: Sequence[float], cores: int, pages: int) -> tuple[int, str]:
    """The lanes per GPU for a recording nobody gave ``--lanes``, and the line that says why.

    Parameters
    ----------
    gpu_gib
        Each GPU's memory in GiB (:func:`gpu_memory_gib`); empty when unknown.
    cores
        Host cores the recorder may use (:func:`host_cores`).
    pages
        Pages to record.

    Returns
    -------
    tuple[int, str]
        The lanes, and a sentence for the log naming what decided them and how to set them.

    Example
    -------
    >>> choose([139.8], 16, 34)[0]
    5
    >>> choose([79.2], 64, 34)[0]
    1
    """
    if not gpu_gib:
        return 1, f"one page at a time on each GPU: nvidia-smi gave no memory reading ({HOW_TO_CHANGE})"
    smallest = min(gpu_gib)
    if smallest < MIN_GPU_GIB:
        return 1, (
            f"one page at a time on each GPU: {smallest:.0f} GiB of GPU memory, under the {MIN_GPU_GIB:.0f} GiB "
            f"from which lanes are chosen by themselves ({HOW_TO_CHANGE})"
        )
    by_cores = cores // (CORES_PER_LANE * len(gpu_gib))
    per_gpu = -(-max(1, pages) // len(gpu_gib))  # ceil: the pages each GPU gets
    lanes = max(1, min(AUTO_LANES, by_cores, per_gpu))
    why = f"{smallest:.0f} GiB of GPU memory, {cores} cores for {len(gpu_gib)} GPU(s), {pages} page(s)"
    if lanes == 1:
        return 1, f"one page at a time on each GPU ({why}; {HOW_TO_CHANGE})"
    return lanes, f"{lanes} pages at a time on each GPU, taking turns on it ({why}; {HOW_TO_CHANGE}, 1: one at a time)"
