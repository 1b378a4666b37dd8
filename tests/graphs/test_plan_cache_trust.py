"""The plan cache trusts only entries this user owns and alone can write, never raises on a bad entry,
and never loses a built plan to a failed store (CPU: a fake build stands in for cuDNN)."""

from __future__ import annotations

import json
import os
import types

import pytest

from cudnn_guide.graphs import plan_cache
from cudnn_guide.graphs.plan_cache import PlanCache, PlanKey

NOBODY = 65534
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def _key() -> PlanKey:
    return PlanKey("graph", "NVIDIA H200", "9.0", 91900, "1.32.0")


class FakeBuild:
    """A build callback: returns a ``BuiltGraph``-like object whose graph serializes to fixed bytes."""

    def __init__(self, blob: bytes = b"fresh-plan") -> None:
        self.blob, self.calls = blob, 0

    def __call__(self):
        self.calls += 1
        graph = types.SimpleNamespace(serialize=lambda as_bytes: list(self.blob))
        return types.SimpleNamespace(graph=graph, uids={"x": 1})


@pytest.fixture
def loads(monkeypatch):
    """What would reach cuDNN: every blob ``get_or_build`` hands to ``load_plan``."""
    loaded = []
    monkeypatch.setattr(plan_cache, "load_plan", lambda blob, uids, handle=None: loaded.append(blob) or blob)
    return loaded


@pytest.fixture
def cache(tmp_path):
    c = PlanCache(tmp_path / "plans")
    c.store(_key(), b"cached-plan", {"x": 1})
    return c


def _rebuilt(cache: PlanCache, loads: list, reason: str) -> None:
    """The entry must be refused with ``reason``, its bytes never loaded, and the plan built instead."""
    build = FakeBuild()
    plan, source = cache.get_or_build(_key(), build)
    assert source == "built" and build.calls == 1, f"the entry was used ({cache.last_event}); expected a rebuild"
    assert loads == [], "untrusted plan bytes reached load_plan (cuDNN)"
    assert reason in cache.last_event, f"last_event {cache.last_event!r} should name {reason!r}"


def test_a_private_entry_of_this_user_is_a_hit(cache, loads):
    plan, source = cache.get_or_build(_key(), FakeBuild())
    assert (source, cache.last_event, loads) == ("cache", "hit", [b"cached-plan"])


@ROOT_ONLY
def test_a_folder_owned_by_another_user_is_refused_even_at_0755(cache, loads):
    os.chown(cache.directory, NOBODY, NOBODY)
    cache.directory.chmod(0o755)
    _rebuilt(cache, loads, f"is owned by uid {NOBODY}")


@ROOT_ONLY
def test_an_entry_owned_by_another_user_is_refused(cache, loads):
    os.chown(cache.path(_key()), NOBODY, NOBODY)
    _rebuilt(cache, loads, f"is owned by uid {NOBODY}")


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_an_entry_group_or_world_can_write_is_refused(cache, loads, mode):
    cache.path(_key()).chmod(mode)
    _rebuilt(cache, loads, "writable by group or others")


def test_a_folder_group_or_world_can_write_is_refused(cache, loads):
    cache.directory.chmod(0o770)
    _rebuilt(cache, loads, "writable by group or others")


def test_an_entry_that_links_to_a_world_writable_file_is_refused(cache, loads, tmp_path):
    target = tmp_path / "elsewhere.cudnnplan"
    target.write_bytes(cache.path(_key()).read_bytes())
    target.chmod(0o666)
    cache.path(_key()).unlink()
    cache.path(_key()).symlink_to(target)
    _rebuilt(cache, loads, "is a symbolic link")


def test_an_entry_that_links_even_to_a_private_valid_entry_is_refused(cache, loads, tmp_path):
    other = PlanCache(tmp_path / "other")
    other.store(_key(), b"someone-elses-choice", {"x": 1})
    cache.path(_key()).unlink()
    cache.path(_key()).symlink_to(other.path(_key()))
    _rebuilt(cache, loads, "is a symbolic link")


def test_a_cache_folder_that_is_a_link_is_refused(cache, loads, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(cache.directory)
    _rebuilt(PlanCache(link), loads, "is a symbolic link")


def test_a_deeply_nested_header_is_refused_not_a_recursion_error(cache, loads):
    cache.path(_key()).write_bytes(b"[" * 200_000 + b"]" * 200_000 + b"\n" + b"plan")
    _rebuilt(cache, loads, "unreadable header")
    cache.path(_key()).write_bytes(b'{"a": ' + b"[" * 5_000 + b"]" * 5_000 + b"}\n" + b"plan")
    _rebuilt(cache, loads, "unreadable header")


def test_brackets_inside_header_strings_do_not_count_as_nesting(tmp_path, loads):
    cache = PlanCache(tmp_path / "plans")
    cache.store(PlanKey("[[[[[[[[[[[[{{{{{{{{{{ a graph named with brackets", "g", "9.0", 1, "1"), b"p", {"x": 1})
    key = PlanKey("[[[[[[[[[[[[{{{{{{{{{{ a graph named with brackets", "g", "9.0", 1, "1")
    assert cache.read(key) == (b"p", {"x": 1}) and cache.last_event == "hit"


def test_a_header_longer_than_the_limit_is_refused_unparsed(cache, loads, monkeypatch):
    header = json.loads(cache.path(_key()).read_bytes().partition(b"\n")[0])
    header["padding"] = "x" * (plan_cache.MAX_HEADER_BYTES + 1)
    cache.path(_key()).write_bytes(json.dumps(header).encode() + b"\ncached-plan")
    monkeypatch.setattr(plan_cache.json, "loads", lambda *a, **k: pytest.fail("an oversized header was parsed"))
    _rebuilt(cache, loads, "unreadable header")


def test_an_entry_that_is_a_directory_is_refused_and_the_built_plan_survives_the_failed_store(cache, loads):
    cache.path(_key()).unlink()
    cache.path(_key()).mkdir(mode=0o700)
    with pytest.warns(RuntimeWarning, match="built but not stored"):
        _rebuilt(cache, loads, "is not a regular file")
    assert cache.last_store_error, "the failed store should be recorded in last_store_error"


def test_a_fifo_entry_is_refused_without_blocking(cache, loads):
    cache.path(_key()).unlink()
    os.mkfifo(cache.path(_key()), 0o600)
    _rebuilt(cache, loads, "is not a regular file")
    assert cache.path(_key()).is_file(), "the rebuilt plan should replace the FIFO"


def test_an_unreadable_entry_is_a_rejection_not_an_error(cache, loads, monkeypatch):
    real_open = os.open

    def deny(path, *args, **kwargs):  # root reads a chmod-000 file: deny the entry's open instead
        if str(path).endswith(".cudnnplan"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(plan_cache.os, "open", deny)
    _rebuilt(cache, loads, "PermissionError")


def test_an_error_while_reading_the_entry_is_a_rejection_not_an_error(cache, loads, monkeypatch):
    def eio(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(plan_cache.os, "fdopen", eio)
    _rebuilt(cache, loads, "could not be read")


def test_a_folder_that_is_a_file_is_refused_and_the_built_plan_is_returned(tmp_path, loads):
    (tmp_path / "plans").write_bytes(b"not a folder")
    cache = PlanCache(tmp_path / "plans")
    with pytest.warns(RuntimeWarning, match="built but not stored"):
        _rebuilt(cache, loads, "is not a folder")


def test_an_unwritable_folder_warns_and_returns_the_built_plan(tmp_path, loads, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(plan_cache.datafiles, "write_bytes", denied)
    cache, build = PlanCache(tmp_path / "plans"), FakeBuild()
    with pytest.warns(RuntimeWarning, match=r"built but not stored .*PermissionError"):
        plan, source = cache.get_or_build(_key(), build)
    assert source == "built" and build.calls == 1 and plan.uids == {"x": 1}
    assert "PermissionError" in cache.last_store_error


def test_a_truncated_entry_is_refused_before_its_bytes_are_read(cache, loads):
    raw = cache.path(_key()).read_bytes()
    cache.path(_key()).write_bytes(raw[:-3])
    _rebuilt(cache, loads, "checksum mismatch")


def test_a_rebuilt_entry_is_stored_and_then_used(cache, loads):
    cache.path(_key()).chmod(0o666)
    _rebuilt(cache, loads, "writable by group or others")
    assert cache.path(_key()).stat().st_mode & 0o777 == 0o600
    plan, source = cache.get_or_build(_key(), FakeBuild())
    assert source == "cache" and loads == [b"fresh-plan"]


def test_an_entry_cudnn_refuses_to_load_is_rebuilt_not_raised(tmp_path, monkeypatch):
    """Bytes that pass every check but that cuDNN will not deserialize (a runtime change the key misses)."""
    cache = PlanCache(tmp_path / "plans")
    cache.store(_key(), b"cached-plan", {"x": 1})
    build = FakeBuild()

    def refuse(blob, uids, handle=None):
        raise RuntimeError("CUDNN_STATUS_BAD_PARAM")

    monkeypatch.setattr(plan_cache, "load_plan", refuse)
    plan, source = cache.get_or_build(_key(), build)
    assert source == "built" and build.calls == 1
    assert "could not load" in cache.last_event and "CUDNN_STATUS_BAD_PARAM" in cache.last_event
