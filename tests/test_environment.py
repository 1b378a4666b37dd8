import json
import os

import pytest
from conftest import HAS_GPU

from cudnn_guide import environment, libcudnn
from cudnn_guide.errors import CudnnLibraryError, NoGPUError


def test_search_follows_frontend_order_and_prefers_ld_library_path(tmp_path, monkeypatch):
    fake = tmp_path / "libcudnn.so.9"
    fake.write_bytes(b"")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nonexistent{os.pathsep}{tmp_path}")
    search = libcudnn.find_libcudnn()
    assert search.found == str(fake)
    assert search.source == "LD_LIBRARY_PATH"
    # the missing directory was tried first, in order
    assert search.candidates[0] == "/nonexistent/libcudnn.so.9"
    # the path on a line of its own: a long site-packages path does not push the line past a page's width
    assert f"found via LD_LIBRARY_PATH:\n  {fake}" in search.explain()


def test_search_lists_site_packages_and_system_when_nothing_found(monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    search = libcudnn.find_libcudnn()
    text = search.explain()
    assert "nvidia/cudnn/lib/libcudnn.so" in text
    assert "system loader" in text


@pytest.mark.skipif(libcudnn.find_libcudnn().found is not None, reason="libcudnn is reachable here")
def test_missing_libcudnn_message_says_where_and_how():
    with pytest.raises(CudnnLibraryError) as info:
        libcudnn.require_cudnn()
    msg = str(info.value)
    assert "nvidia/cudnn/lib" in msg
    assert "pip install nvidia-cudnn-cu1" in msg
    assert "LD_LIBRARY_PATH" in msg


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_no_gpu_is_one_clear_error():
    with pytest.raises(NoGPUError, match="needs a CUDA GPU"):
        environment.collect()
    with pytest.raises(NoGPUError, match="FP8 SDPA needs a CUDA GPU"):
        environment.require_sm((9, 0), "FP8 SDPA")


def _record(**over):
    data = dict(
        gpu="NVIDIA H200",
        sm="9.0",
        sm_count=132,
        memory_gib=139.8,
        l2_mib=60.0,
        driver="580.1",
        cuda="13.0",
        torch="2.11.0",
        cudnn_backend="9.19.0",
        cudnn_frontend="1.32.0",
        libcudnn="/x/libcudnn.so.9",
        python="3.12.3",
        platform="Linux x86_64",
        commit="abc123",
        date_utc="2026-11-29 16:11 UTC",
    )
    data.update(over)
    return environment.EnvironmentRecord(**data)


def test_record_serves_json_stamp_and_html():
    rec = _record()
    again = environment.EnvironmentRecord.from_dict(json.loads(rec.to_json()))
    assert again == rec
    stamp = rec.stamp()
    for part in (
        "NVIDIA H200",
        "driver 580.1",
        "CUDA 13.0",
        "cuDNN 9.19.0",
        "frontend 1.32.0",
        "torch 2.11.0",
        "commit abc123",
        "2026-11-29 16:11 UTC",
    ):
        assert part in stamp
    html = rec._repr_html_()
    assert html.count("<tr>") == len(rec.to_dict())
    assert "<script" not in _record(gpu="<script>")._repr_html_()


def test_commit_comes_from_env_on_a_builder_without_git(monkeypatch):
    monkeypatch.setenv("CUDNN_GUIDE_COMMIT", "deadbeef")
    assert environment.git_commit() == "deadbeef"


def test_version_string():
    assert environment.version_string(91900) == "9.19.0"
    assert environment.version_string(90100) == "9.1.0"
