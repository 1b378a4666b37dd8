"""Record pages anywhere, merge them into one gallery: shards.

A *shard* is what one machine recorded, self-contained, in a folder:

* ``shard.json`` — the machine's environment (GPU model, versions, commit), the md5 of the
  ``cudnn_guide`` package that recorded it, and for each page
  it recorded: the md5 of the example it ran, its seconds, and whether it was skipped;
* ``auto_examples/`` — those pages' files (page, figures, downloads, record, cell times);
* ``history.jsonl`` — their history lines.

``python -m gallery_build.shards record DIR [--keep-going] [plot_xx.py ...]`` writes one (on a GPU);
``python -m gallery_build.shards merge SHARD [SHARD ...]`` combines any number into
``docs/auto_examples`` and ``docs/data/history.jsonl``:

* it checks every shard before it writes anything, and refuses, naming the shard and the file:
  no shards, a corrupt ``shard.json`` or record, a page recorded from another version of its
  example (its md5 differs from the source), or two shards claiming one page on one GPU model;
* it is deterministic: the same shards, given in any order, write the same files;
* when the shards hold every page, they are a full recording: like one made on one machine, it
  writes the reproducibility report against the recording before and the drift it feeds;
* a page recorded on several GPU models goes into the gallery from the GPU that ran it (not
  one that skipped it), by GPU name otherwise; every model's record is kept in
  ``docs/data/by_gpu/<gpu>/`` for the results page's table across GPUs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from cudnn_guide import datafiles
from cudnn_guide.errors import CorruptDataError, GuideError
from cudnn_guide.report.records import RECORD_SUFFIX

from . import drift_bands, history, recording, staging
from .manifest import MANIFEST, package_md5, read_manifest
from .staleness import source_md5

__all__ = [
    "SHARD_MANIFEST",
    "BY_GPU",
    "ShardError",
    "Shard",
    "read_shard",
    "write_shard",
    "merge",
    "gpu_slug",
    "across_gpus",
]

SHARD_MANIFEST = "shard.json"
BY_GPU = "by_gpu"
"""In ``docs/data``: each GPU model's records, for pages recorded on more than one."""


class ShardError(GuideError):
    """A shard cannot be merged; the message names the shard, the file and why.

    Example
    -------
    >>> try:
    ...     merge([], Path("docs"), Path("examples"))
    ... except ShardError as exc:
    ...     print(exc)
    merge: no shards given (pass the folders written by `record`)
    """


def gpu_slug(gpu: str) -> str:
    """A folder name for a GPU model: ``"NVIDIA H200"`` → ``"nvidia-h200"``.

    Parameters
    ----------
    gpu
        torch's device name.

    Returns
    -------
    str
        Lower-case letters, digits and dashes.

    Example
    -------
    >>> gpu_slug("NVIDIA H200")
    'nvidia-h200'
    """
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "unknown-gpu"


class Shard:
    """One shard, read and checked: its folder, environment and pages.

    Example
    -------
    >>> shard = read_shard(Path("shard-h200"))
    >>> shard.gpu, sorted(shard.pages)
    """

    def __init__(
        self, path: Path, environment: dict[str, Any], pages: dict[str, dict[str, Any]], package_md5: str | None = None
    ) -> None:
        self.path, self.environment, self.pages = path, environment, pages
        self.package_md5 = package_md5
        """The md5 of the ``cudnn_guide`` that recorded it (``None`` in shards older than this field)."""

    @property
    def gpu(self) -> str:
        return str(self.environment.get("gpu", "?"))

    def page_files(self, example: str) -> list[Path]:
        """The shard's files of page ``example`` (a file name), relative to its ``auto_examples``."""
        return sorted(staging.page_files(self.path / recording.GALLERY_NAME, Path(example).stem))


def write_shard(
    shard_dir: Path,
    gallery_dir: Path,
    examples_dir: Path,
    history_path: Path,
    names: list[str],
    seconds: dict[str, float],
    environment: dict[str, Any],
) -> Path:
    """Copy the pages ``names`` of a recorded gallery, their history lines and a manifest into a shard.

    Parameters
    ----------
    shard_dir
        The shard's folder (created; must not hold another shard).
    gallery_dir
        The gallery the pages were just recorded into.
    examples_dir
        The example sources.
    history_path
        The history the recording appended to.
    names
        The example file names recorded.
    seconds
        Seconds per recorded example.
    environment
        The recording machine's environment.

    Returns
    -------
    Path
        The shard's ``shard.json``.

    Example
    -------
    >>> write_shard(Path("shard-h200"), gallery, Path("examples"), hist, ["plot_02_conv_bias_relu.py"], secs, env)
    """
    shard_dir = Path(shard_dir)
    if (shard_dir / SHARD_MANIFEST).exists():
        raise ShardError(f"{shard_dir}: already holds a shard; write each recording into a new folder")
    target = shard_dir / recording.GALLERY_NAME
    pages = {}
    for name in sorted(names):
        stem = Path(name).stem
        for rel, src in staging.page_files(gallery_dir, stem).items():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            datafiles.write_bytes(target / rel, src.read_bytes())
        record = datafiles.read_json(Path(gallery_dir) / f"{stem}{RECORD_SUFFIX}")
        pages[name] = {
            "md5": source_md5(Path(examples_dir) / name),
            "seconds": seconds.get(name),
            "skipped": bool(record.get("extra", {}).get("skipped")),
        }
    wanted = {Path(n).stem for n in names}
    lines = [e for e in history.load(history_path) if e.get("example") in wanted]
    latest = {e["example"]: e for e in lines}  # this recording's line is each page's last one
    datafiles.write_text(
        shard_dir / "history.jsonl",
        "".join(json.dumps(latest[k], separators=(",", ":")) + "\n" for k in sorted(latest)),
    )
    manifest = {"environment": environment, "package_md5": package_md5(), "pages": pages}
    return datafiles.write_json(shard_dir / SHARD_MANIFEST, manifest, indent=1)


def read_shard(path: Path) -> Shard:
    """Read a shard and check that it is complete and parses.

    Parameters
    ----------
    path
        The shard's folder.

    Returns
    -------
    Shard
        Its environment and pages.

    Raises
    ------
    ShardError
        No ``shard.json``, a file that does not parse, or a page whose record or page is missing.

    Example
    -------
    >>> read_shard(Path("shard-h200")).gpu
    """
    path = Path(path)
    manifest_path = path / SHARD_MANIFEST
    if not manifest_path.exists():
        raise ShardError(f"shard {path}: no {SHARD_MANIFEST} (is this a folder written by `record`?)")
    try:
        data = datafiles.read_json(manifest_path)
        for p in sorted((path / recording.GALLERY_NAME).glob("*.json")):
            datafiles.read_json(p)
        datafiles.read_jsonl(path / "history.jsonl")
    except CorruptDataError as exc:
        raise ShardError(f"shard {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("pages"), dict) or not data.get("environment"):
        raise ShardError(f"shard {path}: {manifest_path.name} lacks its environment or pages")
    shard = Shard(path, data["environment"], data["pages"], data.get("package_md5"))
    for name in sorted(shard.pages):
        stem = Path(name).stem
        for needed in (f"{stem}.rst", f"{stem}{RECORD_SUFFIX}", f"{name}.md5"):
            if not (path / recording.GALLERY_NAME / needed).exists():
                raise ShardError(f"shard {path}: page {name} has no {needed}")
        record = datafiles.read_json(path / recording.GALLERY_NAME / f"{stem}{RECORD_SUFFIX}")
        if record.get("example") != stem:
            raise ShardError(f"shard {path}: {stem}{RECORD_SUFFIX} is the record of {record.get('example')!r}")
    return shard


def _primary(claims: list[Shard], name: str) -> Shard:
    """The shard whose recording of ``name`` the gallery shows: one that ran it, then by GPU name."""
    return sorted(claims, key=lambda s: (bool(s.pages[name].get("skipped")), s.gpu, str(s.path)))[0]


def _entry_key(entry: dict) -> tuple[str, str, str, str]:
    return (str(entry.get("example")), str(entry.get("recorded_utc")), str(entry.get("gpu")), str(entry.get("commit")))


def merge(shard_paths: list[Path], docs_dir: Path, examples_dir: Path) -> dict[str, str]:
    """Merge shards into ``docs_dir/auto_examples`` and its history; returns page → the GPU it shows.

    Parameters
    ----------
    shard_paths
        Shard folders, in any order.
    docs_dir
        The Sphinx source directory (``docs``).
    examples_dir
        The example sources, whose md5 each recorded page must match.

    Returns
    -------
    dict[str, str]
        Example file name → the GPU model of the recording the gallery now shows.

    Raises
    ------
    ShardError
        No shards, a corrupt or incomplete shard, a page recorded from another version of its
        example, or two shards claiming one page on one GPU model. Nothing is written then.

    Example
    -------
    >>> merge([Path("shard-h200"), Path("shard-b200")], Path("docs"), Path("examples"))
    {'plot_01_environment.py': 'NVIDIA H200', ...}
    """
    if not shard_paths:
        raise ShardError("merge: no shards given (pass the folders written by `record`)")
    shards = sorted((read_shard(p) for p in shard_paths), key=lambda s: (s.gpu, sorted(s.pages), str(s.path)))
    claims: dict[str, list[Shard]] = {}
    for shard in shards:
        for name, page in sorted(shard.pages.items()):
            source = Path(examples_dir) / name
            if not source.exists():
                raise ShardError(f"shard {shard.path}: {name} is not an example here ({examples_dir})")
            if page.get("md5") != source_md5(source):
                raise ShardError(
                    f"shard {shard.path}: {name} was recorded from another version of the example "
                    f"(md5 {page.get('md5')} in {SHARD_MANIFEST}, {source_md5(source)} here); re-record it"
                )
            for other in claims.get(name, []):
                if other.gpu == shard.gpu:
                    raise ShardError(
                        f"shards {other.path} and {shard.path} both recorded {name} on {shard.gpu}; keep one of them"
                    )
            claims.setdefault(name, []).append(shard)
    # everything checked: now write, in a fixed order
    gallery, data = Path(docs_dir) / recording.GALLERY_NAME, Path(docs_dir) / "data"
    shown, sources, entries = {}, {}, []
    for name in sorted(claims):
        primary = sources[name] = _primary(claims[name], name)
        stem = Path(name).stem
        for stale in staging.page_files(gallery, stem).values():
            stale.unlink()
        # the page's md5 last: a merge cut short leaves the page stale, which the build refuses by name
        for rel in sorted(primary.page_files(name), key=lambda r: r.name.endswith(".md5")):
            (gallery / rel).parent.mkdir(parents=True, exist_ok=True)
            datafiles.write_bytes(gallery / rel, (primary.path / recording.GALLERY_NAME / rel).read_bytes())
        shown[name] = primary.gpu
        if len(claims[name]) > 1:
            for shard in claims[name]:
                dest = data / BY_GPU / gpu_slug(shard.gpu) / f"{stem}{RECORD_SUFFIX}"
                dest.parent.mkdir(parents=True, exist_ok=True)
                datafiles.write_bytes(
                    dest, (shard.path / recording.GALLERY_NAME / f"{stem}{RECORD_SUFFIX}").read_bytes()
                )
        for shard in claims[name]:
            entries += [e for e in history.load(shard.path / "history.jsonl") if e.get("example") == stem]
    entries.sort(key=lambda e: (str(e.get("recorded_utc")), str(e.get("gpu")), e["example"]))
    # a shard merged a second time adds nothing: its lines are in the history already, and a
    # duplicate would compare the recording with itself
    known = {_entry_key(e) for e in history.load(data / "history.jsonl")}
    history.append(data / "history.jsonl", [e for e in entries if _entry_key(e) not in known])
    _merge_manifest(gallery, Path(examples_dir), shards, sources)
    if _every_example(claims, Path(examples_dir)):
        # every page: a full recording, assembled from shards; does it reproduce the one before?
        lines = history.load(data / "history.jsonl")
        datafiles.write_json(data / recording.REPRODUCIBILITY, history.reproducibility(lines), indent=1)
        datafiles.write_json(data / drift_bands.DRIFT, drift_bands.drift(drift_bands.recordings(data)), indent=1)
    return shown


def _every_example(pages: Any, examples_dir: Path) -> bool:
    """Whether ``pages`` (example file names) are every example: a full recording."""
    return set(pages) == {p.name for p in examples_dir.glob("plot_*.py")}


def _merge_manifest(gallery: Path, examples_dir: Path, shards: list[Shard], sources: dict[str, Shard]) -> None:
    """Update ``recording.json``: each merged page's GPU, commit and seconds (from the shard it is shown
    from: several shards may share a GPU model); md5s of the examples."""
    previous = read_manifest(gallery) or {}
    pages = dict(previous.get("pages", {}))
    seconds = dict(previous.get("example_seconds", {}))
    for name, shard in sorted(sources.items()):
        env = shard.environment
        pages[name] = {"gpu": shard.gpu, "commit": env.get("commit"), "date_utc": env.get("date_utc")}
        seconds[name] = shard.pages[name].get("seconds") or 0.0
    by_gpu = {s.gpu: s for s in sorted(shards, key=lambda s: str(s.path))}
    main_gpu = max(sorted(by_gpu), key=lambda g: sum(1 for s in sources.values() if s.gpu == g))
    newest = max(
        (s for s in shards if s.gpu == main_gpu), key=lambda s: (str(s.environment.get("date_utc")), str(s.path))
    )
    data = dict(previous)
    data.update(
        {
            "environment": newest.environment,  # the machine of the latest recording merged
            "example_seconds": seconds,
            "pages": pages,
            "examples": {s.name: source_md5(s) for s in sorted(examples_dir.glob("plot_*.py"))},
            "package_md5": newest.package_md5 or package_md5(),  # the package that recorded it
            "merged_from": sorted({f"{s.gpu} @ {s.environment.get('commit')}" for s in shards}),
        }
    )
    data.pop("recorded_utc", None)
    data["recorded_utc"] = max(str(s.environment.get("date_utc", "")) for s in shards)
    datafiles.write_json(gallery / MANIFEST, data, indent=1)


def across_gpus(data_dir: Path) -> list[dict[str, Any]]:
    """The headlines of every page recorded on more than one GPU model, one row per page, headline and GPU.

    Parameters
    ----------
    data_dir
        ``docs/data``, whose ``by_gpu`` folder :func:`merge` fills.

    Returns
    -------
    list[dict[str, Any]]
        ``page``, ``headline``, ``gpu``, ``value``, ``low``, ``high``, ``unit``, ``verdict``; empty
        when every page was recorded on one GPU model.

    Example
    -------
    >>> rows = across_gpus(Path("docs/data"))
    """
    rows = []
    for path in sorted((Path(data_dir) / BY_GPU).glob(f"*/*{RECORD_SUFFIX}")):
        record = datafiles.read_json(path)
        gpu = (record.get("environment") or {}).get("gpu", path.parent.name)
        for h in record.get("headlines", []):
            rows.append(
                {
                    "page": record["example"],
                    "headline": h["name"],
                    "gpu": gpu,
                    "value": h["value"],
                    "low": h.get("low"),
                    "high": h.get("high"),
                    "unit": h.get("unit", ""),
                    "verdict": h.get("verdict", ""),
                }
            )
    return rows


def _main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    import sys

    argv = sys.argv[1:] if argv is None else argv
    root = recording.REPO_ROOT
    if argv[:1] == ["merge"]:
        shown = merge([Path(p) for p in argv[1:]], root / "docs", root / "examples")
        for name, gpu in shown.items():
            print(f"cudnn-guide: merged {name} (shown from {gpu})")
        report = root / "docs" / "data" / recording.REPRODUCIBILITY
        if _every_example(shown, root / "examples"):
            print(f"cudnn-guide: {history.format_reproducibility(datafiles.read_json(report))}")
        return
    if argv[:1] == ["record"] and len(argv) >= 2:
        shard, rest = Path(argv[1]), argv[2:]
        keep_going = "--keep-going" in rest
        names = [a for a in rest if a != "--keep-going"]
        seconds = recording.record_examples(
            root / "docs",
            root / "examples",
            root / "docs" / recording.GALLERY_NAME,
            names=names or None,
            shard=shard,
            keep_going=keep_going,
        )
        print(
            f"cudnn-guide: shard {shard}: {len(seconds)} page(s); merge it with "
            f"`python -m gallery_build.shards merge {shard} ...`"
        )
        return
    raise SystemExit(
        "usage: python -m gallery_build.shards record SHARD_DIR [--keep-going] [plot_xx.py ...]\n"
        "       python -m gallery_build.shards merge SHARD_DIR [SHARD_DIR ...]"
    )


if __name__ == "__main__":  # pragma: no cover
    from gallery_build import shards

    shards._main()
