"""The recording's manifest (``recording.json``): where, when and with which code the pages were recorded."""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Any

from cudnn_guide import datafiles

from .history import SOFTWARE_KEYS
from .staleness import source_md5

__all__ = [
    "MANIFEST",
    "package_md5",
    "package_changed_since_recording",
    "page_entry",
    "kept_pages",
    "page_sources",
    "read_manifest",
    "write_manifest",
    "recording_commit",
    "describe_recording",
    "markdown_literal",
]

MANIFEST = "recording.json"


def package_md5() -> str:
    """One md5 over the source of every :mod:`cudnn_guide` module (what the examples ran with).

    Returns
    -------
    str
        A hex digest.

    Example
    -------
    >>> print(package_md5())
    """
    h = hashlib.md5()
    import cudnn_guide

    top = Path(cudnn_guide.__file__).resolve().parent
    for path in sorted(top.rglob("*.py")):
        h.update(path.relative_to(top).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def package_changed_since_recording(gallery_dir: Path) -> bool:
    """True when ``cudnn_guide`` differs from the code the committed recording ran with.

    Parameters
    ----------
    gallery_dir
        The recorded gallery.

    Returns
    -------
    bool
        Whether the package differs from the recorded one.

    Example
    -------
    >>> if package_changed_since_recording(gallery): print('re-record to refresh')
    """
    manifest = read_manifest(gallery_dir)
    return bool(manifest and manifest.get("package_md5") and manifest["package_md5"] != package_md5())


def read_manifest(gallery_dir: Path, checked: bool = False) -> dict[str, Any] | None:
    """The recording's ``recording.json`` (environment, md5s, build time), or ``None``.

    Parameters
    ----------
    gallery_dir
        The recorded gallery.
    checked
        Also check its shape and its environment's strings (GPU names, commits, versions) against
        :func:`gallery_build.schema.check_manifest`, as the site build does before any of them
        reaches a page.

    Returns
    -------
    dict[str, Any] | None
        The manifest, or ``None``.

    Raises
    ------
    CorruptDataError
        It does not parse, or (``checked``) a field breaks its rule: names ``file:line`` and the field.

    Example
    -------
    >>> print(read_manifest(Path('docs/auto_examples'), checked=True)['recorded_utc'])
    """
    path = Path(gallery_dir) / MANIFEST
    if not path.exists():
        return None
    if checked:
        from . import schema

        return schema.validate_file(path, schema.check_manifest)
    return datafiles.read_json(path)


def write_manifest(
    gallery_dir: Path,
    examples_dir: Path,
    environment: dict[str, Any] | None,
    build_seconds: float | None = None,
    example_seconds: dict[str, float] | None = None,
    interpreters_seconds: float | None = None,
    full_run: bool = False,
    gpus: int | None = None,
    turn_scope: str | None = None,
) -> Path:
    """Write ``recording.json``: the environment, each example's md5, the date and the build time.

    Seconds per example accumulate across partial recordings (an example recorded now replaces
    its previous time); ``full_recording`` keeps the wall time of the last run that recorded
    every example, so recording one page later does not pass its time off as the gallery's.

    Each page keeps where it was recorded (``pages``: :func:`page_entry`). A run that records some
    pages replaces their entries and keeps the others' (the gallery's environment stands for a page
    that had none), and the gallery's ``environment`` stays the previous one (a few pages never
    describe every page); ``merged_from`` then names every GPU and commit the pages come from, when
    there is more than one. A run that records every example describes them all.

    Parameters
    ----------
    gallery_dir
        The recorded gallery.
    examples_dir
        The example sources.
    environment
        The recording environment (``EnvironmentRecord.to_dict()``).
    build_seconds
        Wall time of this recording run.
    example_seconds
        Wall time of each example recorded in this run (its own process, start-up included).
    interpreters_seconds
        How long this run waited for the pages' interpreters to start (kept from the last run
        that recorded every example, with ``full_recording``).
    full_run
        This run recorded every example.
    gpus
        How many GPUs recorded at once (kept with ``full_recording``).
    turn_scope
        How the pages recorded now held the GPU's turn in lanes (``None``: one page at a time).

    Returns
    -------
    Path
        The manifest's path.

    Example
    -------
    >>> write_manifest(gallery, examples, environment.collect().to_dict(), build_seconds=230.0)
    """
    previous = read_manifest(gallery_dir) or {}
    moment = _dt.datetime.now(_dt.timezone.utc)
    now = moment.isoformat(timespec="seconds")
    now_stamp = moment.strftime("%Y-%m-%d %H:%M UTC")  # a page's date, as shards write it
    seconds = dict(previous.get("example_seconds", {}), **(example_seconds or {}))
    full = previous.get("full_recording")
    if full_run and build_seconds is not None:
        full = {
            "seconds": build_seconds,
            "utc": now,
            "commit": (environment or {}).get("commit"),
            "interpreters_start_seconds": interpreters_seconds,
            "gpus": gpus,
        }
    exists = {s.name for s in Path(examples_dir).glob("plot_*.py")}
    recorded_now = dict(example_seconds or {})
    keep_previous = not full_run and previous.get("environment")
    pages = kept_pages(previous, exists) if keep_previous else {}  # the pages not recorded now keep theirs
    if environment:
        here = page_entry(environment, package_md5(), turn_scope, date_utc=now_stamp)
        pages.update({name: dict(here) for name in (recorded_now or (exists if full_run else ()))})
    sources = page_sources(pages)
    merged = sorted(sources) if len(sources) > 1 or (keep_previous and previous.get("merged_from")) else []
    data = {
        "last_run_seconds": recorded_now,
        "recorded_utc": now,
        "environment": previous["environment"] if keep_previous else environment,
        "build_seconds": build_seconds,
        "example_seconds": seconds,
        "full_recording": full,
        "examples": {s.name: source_md5(s) for s in sorted(Path(examples_dir).glob("plot_*.py"))},
        "package_md5": (previous.get("package_md5") if keep_previous else None) or package_md5(),
    }
    if pages:
        data["pages"] = pages
    if merged:
        data["merged_from"] = merged
    return datafiles.write_json(Path(gallery_dir) / MANIFEST, data, indent=1)


def page_entry(
    environment: dict[str, Any], package: str | None, turn_scope: str | None = None, date_utc: str | None = None
) -> dict[str, Any]:
    """Where one page was recorded, as ``recording.json``'s ``pages`` keeps it.

    Parameters
    ----------
    environment
        The recording environment (``EnvironmentRecord.to_dict()``).
    package
        The ``cudnn_guide`` package's md5 (:func:`package_md5`) that recorded it.
    turn_scope
        How its lane held the GPU's turn (``None``: recorded one page at a time; left out).
    date_utc
        When, if ``environment`` does not say (``environment["date_utc"]`` wins).

    Returns
    -------
    dict[str, Any]
        ``gpu``, ``commit``, ``date_utc``, ``software`` (the versions two recordings must share to
        be compared), ``package_md5`` and, in lanes, ``turn_scope``.

    Example
    -------
    >>> page_entry({"gpu": "NVIDIA H200", "commit": "abc", "torch": "2.11.0"}, "d41d8")["software"]["torch"]
    '2.11.0'
    """
    entry = {
        "gpu": environment.get("gpu"),
        "commit": environment.get("commit"),
        "date_utc": environment.get("date_utc") or date_utc,
        "software": {k: environment[k] for k in SOFTWARE_KEYS if environment.get(k) is not None},
        "package_md5": package,
    }
    if turn_scope is not None:
        entry["turn_scope"] = turn_scope
    return {k: v for k, v in entry.items() if v is not None or k in ("gpu", "commit")}  # unknown: left out


def kept_pages(previous: dict[str, Any], exists: set[str]) -> dict[str, Any]:
    """The page entries of an earlier manifest, for the examples that still exist.

    A manifest from before pages were kept has only the gallery's environment: it stands for every
    example then.

    Parameters
    ----------
    previous
        The earlier ``recording.json`` (empty: none).
    exists
        The examples' file names now.

    Returns
    -------
    dict[str, Any]
        File name → :func:`page_entry` (copies).

    Example
    -------
    >>> kept_pages({"environment": {"gpu": "NVIDIA H200", "commit": "abc"}}, {"plot_01.py"})["plot_01.py"]["commit"]
    'abc'
    """
    kept = previous.get("pages")
    if not kept and previous.get("environment"):
        kept = dict.fromkeys(exists, page_entry(previous["environment"], previous.get("package_md5")))
    return {k: dict(v) for k, v in (kept or {}).items() if k in exists}


def page_sources(pages: dict[str, Any]) -> set[str]:
    """Every ``<GPU> @ <commit>`` that page entries name (``merged_from``'s form); an entry lacking either names none.

    Parameters
    ----------
    pages
        File name → :func:`page_entry`.

    Returns
    -------
    set[str]
        The sources.

    Example
    -------
    >>> page_sources({"a.py": {"gpu": "NVIDIA H200", "commit": "abc"}, "b.py": {"gpu": None, "commit": None}})
    {'NVIDIA H200 @ abc'}
    """
    return {f"{e['gpu']} @ {e['commit']}" for e in pages.values() if e.get("gpu") and e.get("commit")}


def recording_commit(gallery_dir: Path) -> str:
    """The commit the committed recording ran at (``"none"`` before the first recording).

    Parameters
    ----------
    gallery_dir
        The recorded gallery.

    Returns
    -------
    str
        The commit from ``recording.json``.

    Example
    -------
    >>> recording_commit(Path('docs/auto_examples'))
    """
    manifest = read_manifest(gallery_dir) or {}
    return str((manifest.get("environment") or {}).get("commit") or "none")


def describe_recording(gallery_dir: Path) -> str:
    """One line for the console and the home page: where and when the recording was measured.

    Parameters
    ----------
    gallery_dir
        The recorded gallery.

    Returns
    -------
    str
        GPU, versions, date and commit in one line.

    Example
    -------
    >>> print(describe_recording(Path('docs/auto_examples')))
    """
    manifest = read_manifest(gallery_dir)
    if not manifest or not manifest.get("environment"):
        return "no GPU recording has been committed yet"
    env = manifest["environment"]
    # pages merged from shards name their own commit
    commits = Counter(p["commit"] for p in manifest.get("pages", {}).values() if p.get("commit"))
    if len(commits) > 1:
        commit = "commits " + ", ".join(f"{c} ({n} page{'s' if n > 1 else ''})" for c, n in commits.most_common())
    else:
        commit = f"commit {next(iter(commits), env.get('commit', '?'))}"
    return (
        f"{env.get('gpu', '?')} (driver {env.get('driver', '?')}, CUDA {env.get('cuda', '?')}, "
        f"cuDNN {env.get('cudnn_backend', '?')}, frontend {env.get('cudnn_frontend', '?')}, "
        f"torch {env.get('torch', '?')}) on {manifest.get('recorded_utc', '?')}, {commit}"
    )


_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def markdown_literal(text: str) -> str:
    r"""``text`` for a MyST substitution, to be read as plain text: never as HTML, a link or markup.

    MyST parses a substitution's value as Markdown, where ``<script>`` is raw HTML that reaches
    the page as it is. Every ASCII punctuation character is backslash-escaped (CommonMark reads
    ``\<`` as a literal ``<``, which the HTML writer then escapes) and line breaks become spaces.

    Parameters
    ----------
    text
        Plain text (a recording's description, from recorded data).

    Returns
    -------
    str
        Markdown that renders as exactly ``text``.

    Example
    -------
    >>> markdown_literal("NVIDIA <b>H200</b>")
    'NVIDIA \\<b\\>H200\\<\\/b\\>'
    """
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", " ".join(str(text).splitlines()))
