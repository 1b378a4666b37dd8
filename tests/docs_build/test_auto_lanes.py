"""auto_lanes: the recorder's lanes when nobody gives ``--lanes``, and the GPU memory it reads from nvidia-smi."""

from __future__ import annotations

import os
import stat

import pytest
from gallery_build import auto_lanes


@pytest.mark.parametrize(
    ("gib", "cores", "pages", "lanes", "said"),
    [
        ([139.8], 16, 34, 5, "5 pages at a time on each GPU"),  # the H200 builder
        ([139.8], 10, 34, 3, "3 pages at a time"),  # three cores a lane
        ([139.8], 5, 34, 1, "one page at a time"),
        ([139.8], 16, 1, 1, "one page at a time"),  # `nox -s docs -- 5`: no lane without a page
        ([139.8], 16, 2, 2, "2 pages at a time"),
        ([139.8, 139.8], 32, 34, 5, "5 pages at a time"),  # two H200s of one host, 32 cores
        ([139.8, 139.8], 16, 34, 2, "2 pages at a time"),  # 16 cores for two GPUs' lanes
        ([139.8, 139.8], 5, 34, 1, "one page at a time"),
        ([139.8, 79.2], 64, 34, 1, "79 GiB of GPU memory, under the 120 GiB"),  # the smallest GPU decides
        ([79.2], 64, 34, 1, "under the 120 GiB"),  # an 80 GB card: not where lanes were measured
        ([], 64, 34, 1, "nvidia-smi gave no memory reading"),
    ],
)
def test_lanes_are_chosen_only_on_a_machine_like_the_one_they_were_measured_on(gib, cores, pages, lanes, said):
    chosen, why = auto_lanes.choose(gib, cores, pages)
    assert chosen == lanes
    assert said in why and "--lanes N or CUDNN_GUIDE_LANES=N sets it" in why


def _fake_smi(tmp_path, monkeypatch, out: str, code: int = 0) -> None:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '%s' '{out}'\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")


def test_gpu_memory_is_read_for_the_gpus_cuda_will_use(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, "0, 143771, [N/A]\n1, 81559, Disabled\n")
    big, small = 143771 / 1024, 81559 / 1024
    assert auto_lanes.gpu_memory_gib(None, "") == pytest.approx([big, small])
    assert auto_lanes.gpu_memory_gib("1", "PCI_BUS_ID") == pytest.approx([small])
    assert auto_lanes.gpu_memory_gib("1,0", "PCI_BUS_ID") == pytest.approx([small, big])
    # CUDA's default order may number the GPUs otherwise than nvidia-smi: each visible one counts as the smallest
    assert auto_lanes.gpu_memory_gib("0", "") == pytest.approx([small])
    assert auto_lanes.gpu_memory_gib("0", "FASTEST_FIRST") == pytest.approx([small])
    assert auto_lanes.gpu_memory_gib("", "") == []  # no GPU visible
    assert auto_lanes.gpu_memory_gib("GPU-5c1b0c7e", "") == []  # a UUID: no reading rather than a guess
    assert auto_lanes.gpu_memory_gib("2", "PCI_BUS_ID") == []  # a GPU nvidia-smi did not list


def test_a_gpu_split_by_mig_gives_no_reading(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, "0, 143771, Enabled\n")  # CUDA sees its slices, nvidia-smi the whole GPU
    assert auto_lanes.gpu_memory_gib(None, "") == []


@pytest.mark.parametrize(
    ("out", "code"), [("0, [N/A], Disabled\n", 0), ("garbage\n", 0), ("0, 143771\n", 0), ("0, 143771, [N/A]\n", 9)]
)
def test_a_reading_that_cannot_be_trusted_gives_none(tmp_path, monkeypatch, out, code):
    _fake_smi(tmp_path, monkeypatch, out, code)
    assert auto_lanes.gpu_memory_gib(None, "") == []


def test_no_nvidia_smi_gives_no_reading(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi
    assert auto_lanes.gpu_memory_gib(None, "") == []
    assert auto_lanes.choose(auto_lanes.gpu_memory_gib(None, ""), 64, 34)[0] == 1
