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

import contextlib
import hashlib
import io
import json
import math
import os
import re
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudnn_guide import datafiles
from cudnn_guide.errors import CorruptDataError, GuideError
from cudnn_guide.report.records import RECORD_SUFFIX

from . import drift_bands, gpu_turns, history, recording, schema, staging
from .cell_times import CELLS_SUFFIX
from .manifest import MANIFEST, kept_pages, package_md5, page_entry, page_sources, read_manifest
from .page_checks import HEALTH_EXCEPTIONS
from .staleness import source_md5

__all__ = [
    "SHARD_MANIFEST",
    "BY_GPU",
    "ShardError",
    "Shard",
    "read_shard",
    "write_shard",
    "merge",
    "rewiden",
    "gpu_slug",
    "across_gpus",
]

SHARD_MANIFEST = "shard.json"
ALLOW_OTHER_ENVIRONMENT = "--allow-other-environment"
"""The ``merge`` flag that accepts shards recorded with other software than the gallery's."""
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
    """One shard, read and checked: its folder, environment, pages and the bytes of their files.

    Example
    -------
    >>> shard = read_shard(Path("shard-h200"))
    >>> shard.gpu, sorted(shard.pages)
    """

    def __init__(
        self,
        path: Path,
        environment: dict[str, Any],
        pages: dict[str, dict[str, Any]],
        package_md5: str | None = None,
        files: dict[str, bytes] | None = None,
        history_lines: list[dict[str, Any]] | None = None,
        turn_scope: str | None = None,
        round_budget_ms: float | None = None,
    ) -> None:
        self.path, self.environment, self.pages = path, environment, pages
        self.turn_scope = turn_scope
        """How its lanes held the GPU's turn (``cell``, ``measured``), ``None`` for one lane or older shards."""
        self.round_budget_ms = round_budget_ms
        """``compare``'s round budget where ``CUDNN_GUIDE_ROUND_BUDGET_MS`` replaced the default, else ``None``."""
        self.package_md5 = package_md5
        """The md5 of the ``cudnn_guide`` that recorded it (``None`` in shards older than this field)."""
        self.files = files or {}
        """Each file of its ``auto_examples`` (POSIX path relative to it) → its bytes, read once."""
        self.history_lines = history_lines or []
        """Its ``history.jsonl``, parsed and checked."""

    @property
    def gpu(self) -> str:
        return str(self.environment.get("gpu", "?"))

    def page_files(self, example: str) -> list[Path]:
        """The shard's files of page ``example`` (a file name), relative to its ``auto_examples``."""
        stem = Path(example).stem
        return sorted(Path(rel) for rel in self.files if _owner(rel, [stem]) == stem)


PAGE_NAME = re.compile(r"plot_[A-Za-z0-9_-]+\.py")
"""What a page of a shard may be called: an example's file name, no folder (checked against ``examples/`` too)."""
COST_SUFFIX = ".cost.json"
PAGE_SUFFIXES = (".rst", ".py", ".ipynb", ".zip", ".py.md5", RECORD_SUFFIX)
"""The files every recorded page has, ran or skipped: sphinx-gallery's ``generate_file_rst`` writes the
page, the copy of the script, the notebook, the zip and the md5 (:func:`~gallery_build.skip_pages.write_skip_page`
writes the same for a skipped page), and the record is ``hooks.reset_between_examples``'s (or the skip page's)."""
RAN_SUFFIXES = (CELLS_SUFFIX, COST_SUFFIX)
"""The files only a page that ran has: its cell times (:func:`~gallery_build.cell_times.time_cells`) and its
run time (sphinx-gallery caches it when the script passes)."""
OPTIONAL_SUFFIXES = (".codeobj.json",)
"""sphinx-gallery writes ``.codeobj.json`` only when it found names in the code to link; a skip page has none."""


def _owner(rel: str, stems: Any) -> str | None:
    """The page among ``stems`` that a gallery file (POSIX path relative to the gallery) belongs to, if any."""
    name = rel.rsplit("/", 1)[-1]
    folder = rel[: -len(name)]
    for stem in stems:
        if folder == "" and name in {stem + s for s in (*PAGE_SUFFIXES, *RAN_SUFFIXES, *OPTIONAL_SUFFIXES)}:
            return stem
        if folder == "images/" and re.fullmatch(rf"sphx_glr_{re.escape(stem)}_\d{{3}}\.png", name):
            return stem
        if folder == "images/thumb/" and name == f"sphx_glr_{stem}_thumb.png":
            return stem
    return None


def _refuse(shard: Path, what: str, fix: str) -> ShardError:
    return ShardError(f"shard {shard}: {what}. Fix: {fix}. Nothing was merged.")


def _read_regular(shard: Path, path: Path) -> bytes:
    """The bytes of ``path``, refused unless it is a plain file with one name (no link of any kind, no FIFO)."""
    fix = "copy the real files into the shard (`cp -rL`), or re-record it; a merge copies no links"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise _refuse(shard, f"{path} is missing", "re-record the shard, or copy it again in full") from None
    except OSError as exc:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise _refuse(shard, f"{path} is a symbolic link (to {os.readlink(path)})", fix) from None
        raise _refuse(shard, f"{path} cannot be read ({exc.strerror})", fix) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(shard, f"{path} is not a plain file (a device, FIFO or socket)", fix)
        if info.st_nlink > 1:
            raise _refuse(shard, f"{path} is a hard link ({info.st_nlink} names for one file)", fix)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def _read_tree(shard: Path, folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, relative POSIX path → bytes; a link or special file anywhere is refused."""
    fix = "copy the real files into the shard (`cp -rL`), or re-record it; a merge copies no links"
    out: dict[str, bytes] = {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        path = Path(entry.path)
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            raise _refuse(shard, f"{path} is a symbolic link (to {os.readlink(path)})", fix)
        if stat.S_ISDIR(mode):
            out.update({f"{entry.name}/{rel}": data for rel, data in _read_tree(shard, path).items()})
        elif not stat.S_ISREG(mode):  # refused unopened: opening a device or FIFO can block or act
            raise _refuse(shard, f"{path} is not a plain file (a device, FIFO or socket)", fix)
        else:
            out[entry.name] = _read_regular(shard, path)
    return out


def _parse_json(shard: Path, path: Path, data: bytes) -> Any:
    """``data`` (the bytes of ``path``) as JSON, or the error :func:`datafiles.read_json` gives, inside the shard's."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ShardError(f"shard {shard}: {CorruptDataError(path, f'not UTF-8 text ({exc.reason})')}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply to parse
        problem = _json_problem(exc)
        raise ShardError(
            f"shard {shard}: {CorruptDataError(path, problem, line=getattr(exc, 'lineno', None))}"
        ) from None


def _json_problem(exc: ValueError | RecursionError) -> str:
    """What a failed :func:`json.loads` says: a syntax error has a column, a 5000-digit integer or deep nesting none."""
    if isinstance(exc, RecursionError):
        return f"not valid JSON (nested too deeply to parse: {exc})"
    msg, column = getattr(exc, "msg", str(exc)), getattr(exc, "colno", None)
    return f"not valid JSON ({msg}, column {column})" if column is not None else f"not valid JSON ({msg})"


SCHEMA_CHECKS = {
    RECORD_SUFFIX: schema.check_record,
    CELLS_SUFFIX: schema.check_cells,
    COST_SUFFIX: schema.check_cost,
}
"""The shape each JSON file of a shard's gallery must have, by suffix (the build checks the same)."""


def _check_shape(shard: Path, path: Path, data: Any, check: Callable[[Any], None], line: int | None = None) -> None:
    """Refuse ``data`` (parsed from ``path``) unless ``check`` (a ``schema.check_*``) accepts it, naming the field."""
    try:
        check(data)
    except schema.SchemaError as exc:
        fix = "re-record the shard (`shards record`) or copy it again in full; a merge takes no hand-edited data"
        raise ShardError(
            f"shard {shard}: {CorruptDataError(path, str(exc), line=line, fix=fix)} Nothing was merged."
        ) from None


def _figure_problem(data: bytes) -> str | None:
    """Why a PNG's bytes do not decode as a PNG, or ``None`` when they do."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            if img.format != "PNG":
                return f"a {img.format} image, not a PNG"
    except Exception as exc:  # PIL raises many kinds for truncated or foreign files
        return f"{type(exc).__name__}: {exc}"
    return None


def write_shard(
    shard_dir: Path,
    gallery_dir: Path,
    examples_dir: Path,
    history_path: Path,
    names: list[str],
    seconds: dict[str, float],
    environment: dict[str, Any],
    turn_scope: str | None = None,
    round_budget_ms: float | None = None,
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
    turn_scope
        How its lanes held the GPU's turn (:func:`gallery_build.gpu_turns.turn_scope`), ``None`` for one lane.
    round_budget_ms
        ``compare``'s round budget where ``CUDNN_GUIDE_ROUND_BUDGET_MS`` replaced the default (an A/B:
        :func:`merge` refuses such a shard), else ``None``.

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
    manifest = {"environment": environment, "package_md5": package_md5(), "pages": pages, "turn_scope": turn_scope}
    if round_budget_ms is not None:
        manifest["round_budget_ms"] = round_budget_ms
    return datafiles.write_json(shard_dir / SHARD_MANIFEST, manifest, indent=1)


def read_shard(path: Path) -> Shard:
    """Read a shard and check everything in it that needs no gallery: every file, once, into memory.

    Parameters
    ----------
    path
        The shard's folder.

    Returns
    -------
    Shard
        Its environment, pages, their files' bytes and its history lines.

    Raises
    ------
    ShardError
        No ``shard.json``; a link (symbolic or hard), FIFO or device anywhere in it; a file that
        does not parse (JSON naming its line, a history line of another shape or holding a NaN); a
        file of the wrong shape (:mod:`gallery_build.schema`: the environment in ``shard.json``, each
        record, cell times, run time and history line, naming the file and the field); a
        page name that is not an example's file name; a page without its complete set of files
        (:data:`PAGE_SUFFIXES`, and :data:`RAN_SUFFIXES` with at least one figure for a page that
        ran), with a figure that does not decode, an ``.md5`` or script copy that is not the
        example ``shard.json`` names, or a record of another page; a file of no page.

    Example
    -------
    >>> read_shard(Path("shard-h200")).gpu
    """
    path = Path(path)
    manifest_path = path / SHARD_MANIFEST
    if not path.is_dir() or not os.path.lexists(manifest_path):
        raise _refuse(path, f"no {SHARD_MANIFEST} (is this a folder written by `record`?)", "pass the folder it wrote")
    data = _parse_json(path, manifest_path, _read_regular(path, manifest_path))
    gallery = path / recording.GALLERY_NAME
    if gallery.is_symlink() or not gallery.is_dir():
        raise _refuse(path, f"{gallery} is not a folder", "merge the folder `record` wrote, as it wrote it")
    files = _read_tree(path, gallery)
    for rel in sorted(files):
        if rel.endswith((".json", ".ipynb")):
            parsed = _parse_json(path, gallery / rel, files[rel])
            check = next((c for suffix, c in SCHEMA_CHECKS.items() if rel.endswith(suffix)), None)
            if check is not None:
                _check_shape(path, gallery / rel, parsed, check)
    lines = _parse_history(path, path / "history.jsonl", _read_regular(path, path / "history.jsonl"))
    if not isinstance(data, dict) or not isinstance(data.get("pages"), dict) or not data.get("environment"):
        raise _refuse(path, f"{manifest_path.name} lacks its environment or pages", "re-record the shard")
    if not isinstance(data["environment"], dict) or not data["pages"]:
        raise _refuse(path, f"{manifest_path} has no pages or no environment object", "re-record the shard")
    _check_shape(path, manifest_path, data["environment"], schema.check_environment)
    if not isinstance(data.get("package_md5"), (str, type(None))):
        raise _refuse(path, f"{manifest_path}: package_md5 is not a string", "re-record the shard")
    if data.get("turn_scope") not in (None, *gpu_turns.SCOPES):
        raise _refuse(
            path, f"{manifest_path}: turn_scope is not one of {', '.join(gpu_turns.SCOPES)}", "re-record the shard"
        )
    budget = data.get("round_budget_ms")
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget) or budget <= 0
    ):
        raise _refuse(path, f"{manifest_path}: round_budget_ms is not a positive number", "re-record the shard")
    shard = Shard(
        path, data["environment"], data["pages"], data.get("package_md5"), files, lines, data.get("turn_scope"), budget
    )
    for name in sorted(shard.pages):
        _check_page(shard, name)
    stray = [rel for rel in sorted(files) if _owner(rel, [Path(n).stem for n in shard.pages]) is None]
    if stray:
        raise _refuse(
            path,
            f"{gallery / stray[0]} belongs to no page {SHARD_MANIFEST} lists ({len(stray)} such file(s))",
            f"remove it, or re-record the shard so that {SHARD_MANIFEST} names every page it holds",
        )
    return shard


def _parse_history(shard: Path, path: Path, data: bytes) -> list[dict[str, Any]]:
    """The shard's history lines, each checked as :func:`gallery_build.history.load` checks them."""
    out = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply to parse
            problem = f"line is {_json_problem(exc)}"
            raise ShardError(f"shard {shard}: {CorruptDataError(path, problem, line=number)}") from None
        try:
            out.append(history.check_entry(entry, path, number))
        except CorruptDataError as exc:
            raise ShardError(f"shard {shard}: {exc}") from None
        # check_entry is the loader's check; the build's is stricter (GPU name, commit, signs of medians)
        _check_shape(shard, path, entry, schema.check_history_line, line=number)
    return out


def _check_page(shard: Shard, name: str) -> None:
    """Refuse page ``name`` of ``shard`` unless its files are all there, parse, decode and are its example's."""
    path, gallery, files = shard.path, shard.path / recording.GALLERY_NAME, shard.files
    rerecord = "re-record the page into a new shard (`shards record`), or copy the shard again in full"
    if not isinstance(name, str) or not PAGE_NAME.fullmatch(name):
        raise _refuse(
            path,
            f"{SHARD_MANIFEST} names a page {name!r}, which is no example's file name (plot_*.py, no folder)",
            "merge only shards written by `shards record`",
        )
    info, stem = shard.pages[name], Path(name).stem
    md5 = info.get("md5") if isinstance(info, dict) else None
    if not isinstance(md5, str) or not re.fullmatch(r"[0-9a-f]{32}", md5):
        raise _refuse(path, f"{SHARD_MANIFEST}: page {name} has no md5 of its example", rerecord)
    seconds, skipped = info.get("seconds"), info.get("skipped", False)
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < float("inf")
    ):
        raise _refuse(path, f"{SHARD_MANIFEST}: page {name} has seconds {seconds!r}, not a time", rerecord)
    if not isinstance(skipped, bool):
        raise _refuse(path, f"{SHARD_MANIFEST}: page {name} has skipped {skipped!r}, not true or false", rerecord)
    thumb = f"images/thumb/sphx_glr_{stem}_thumb.png"
    needed = [stem + s for s in PAGE_SUFFIXES] + [thumb] + ([] if skipped else [stem + s for s in RAN_SUFFIXES])
    missing = [rel for rel in needed if rel not in files]
    if missing:
        raise _refuse(path, f"page {name} has no {', '.join(missing)} (in {gallery})", rerecord)
    record = _parse_json(path, gallery / f"{stem}{RECORD_SUFFIX}", files[f"{stem}{RECORD_SUFFIX}"])
    if not isinstance(record, dict) or record.get("example") != stem:
        example = record.get("example") if isinstance(record, dict) else record
        raise _refuse(path, f"{stem}{RECORD_SUFFIX} is the record of {example!r}", rerecord)
    if bool((record.get("extra") or {}).get("skipped")) != skipped:
        raise _refuse(
            path, f"page {name}: {SHARD_MANIFEST} says skipped={skipped}, its record says otherwise", rerecord
        )
    stored = files[f"{name}.md5"].decode("utf-8", errors="replace").strip()
    if stored != md5:
        raise _refuse(path, f"{gallery / (name + '.md5')} holds {stored!r}, {SHARD_MANIFEST} says {md5}", rerecord)
    if hashlib.md5(files[f"{stem}.py"]).hexdigest() != md5:
        copy = gallery / f"{stem}.py"
        raise _refuse(path, f"{copy} is not the example {SHARD_MANIFEST} names (md5 {md5})", rerecord)
    try:
        rst = files[f"{stem}.rst"].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(path, f"{gallery / (stem + '.rst')} is not UTF-8 text ({exc.reason})", rerecord) from None
    shown = {f"images/{m}" for m in re.findall(rf"/images/(sphx_glr_{re.escape(stem)}_\d{{3}}\.png)", rst)}
    figures = {rel for rel in files if rel.startswith("images/sphx_glr_") and _owner(rel, [stem]) == stem}
    if not skipped and not shown and stem not in HEALTH_EXCEPTIONS:
        raise _refuse(path, f"page {name} shows no figure ({gallery / (stem + '.rst')})", rerecord)
    if shown - figures:
        raise _refuse(path, f"page {name} shows {', '.join(sorted(shown - figures))}, which the shard lacks", rerecord)
    if figures - shown:
        unshown = ", ".join(sorted(figures - shown))
        raise _refuse(path, f"page {name} does not show {unshown} (a figure of another recording)", rerecord)
    for rel in sorted(figures | {thumb}):
        why = _figure_problem(files[rel])
        if why:
            raise _refuse(path, f"figure {gallery / rel} does not decode ({why})", rerecord)
    try:
        with zipfile.ZipFile(io.BytesIO(files[f"{stem}.zip"])) as z:
            if z.testzip() is not None or f"{stem}.py" not in z.namelist():
                raise zipfile.BadZipFile(f"no intact {stem}.py inside")
    except zipfile.BadZipFile as exc:
        raise _refuse(path, f"{gallery / (stem + '.zip')} is not the page's download ({exc})", rerecord) from None


def _primary(claims: list[Shard], name: str) -> Shard:
    """The shard whose recording of ``name`` the gallery shows: one that ran it, then by GPU name."""
    return sorted(claims, key=lambda s: (bool(s.pages[name].get("skipped")), s.gpu, str(s.path)))[0]


def _entry_key(entry: dict) -> tuple[str, str, str, str]:
    return (str(entry.get("example")), str(entry.get("recorded_utc")), str(entry.get("gpu")), str(entry.get("commit")))


def merge(
    shard_paths: list[Path],
    docs_dir: Path,
    examples_dir: Path,
    *,
    allow_other_environment: bool = False,
) -> dict[str, str]:
    """Merge shards into ``docs_dir/auto_examples`` and its history; returns page → the GPU it shows.

    Everything is checked before anything is written (:func:`read_shard`, then against the
    examples and the gallery). The gallery is then written as a whole: a copy of it, with the
    shards' pages in, replaces it in one exchange of folders at the end, so a merge refused or
    cut short leaves it as it was. The data files follow (``docs/data/by_gpu``, the history,
    and for a full recording the reproducibility report and drift), each replaced atomically;
    merging the same shards again completes a merge cut short between the two.

    Parameters
    ----------
    shard_paths
        Shard folders, in any order.
    docs_dir
        The Sphinx source directory (``docs``).
    examples_dir
        The example sources, whose md5 each recorded page must match.
    allow_other_environment
        Merge shards recorded with other software (:data:`~gallery_build.history.SOFTWARE_KEYS`)
        or another ``cudnn_guide`` than the gallery's. Each page then names its own software in
        ``recording.json``; the gallery's environment changes only with a full recording.

    Returns
    -------
    dict[str, str]
        Example file name → the GPU model of the recording the gallery now shows.

    Raises
    ------
    ShardError
        No shards; a corrupt, incomplete or linked shard (:func:`read_shard`); a page that is
        not an example here or was recorded from another version of it; two shards claiming one
        page on one GPU model; a shard recorded with other software or package than the gallery
        (without ``allow_other_environment``), or one recorded with ``CUDNN_GUIDE_ROUND_BUDGET_MS`` set
        (an A/B). Nothing is written then. Shards of either turn scope
        (:data:`gallery_build.gpu_turns.SCOPES`) merge, and each page keeps its shard's scope.

    Example
    -------
    >>> merge([Path("shard-h200"), Path("shard-b200")], Path("docs"), Path("examples"))
    {'plot_01_environment.py': 'NVIDIA H200', ...}
    """
    if not shard_paths:
        raise ShardError("merge: no shards given (pass the folders written by `record`)")
    shards = sorted((read_shard(p) for p in shard_paths), key=lambda s: (s.gpu, sorted(s.pages), str(s.path)))
    for shard in shards:
        if shard.round_budget_ms is not None:
            raise ShardError(
                f"shard {shard.path}: recorded with CUDNN_GUIDE_ROUND_BUDGET_MS={shard.round_budget_ms:g} (an A/B of "
                "compare's round budget), not the default the site's recording uses. Fix: record it again without "
                "that variable; to study it, read the shard where it lies (tools/round_budget_ab.py). "
                "Nothing was merged."
            )
    examples = {p.name: p for p in sorted(Path(examples_dir).glob("plot_*.py")) if p.is_file() and not p.is_symlink()}
    claims: dict[str, list[Shard]] = {}
    for shard in shards:
        for name, page in sorted(shard.pages.items()):
            source = examples.get(name)
            if source is None:
                raise ShardError(
                    f"shard {shard.path}: {name} is not an example here ({examples_dir}). Fix: merge it into the "
                    "checkout whose examples it recorded, or re-record the shard here. Nothing was merged."
                )
            if page.get("md5") != source_md5(source):
                raise ShardError(
                    f"shard {shard.path}: {name} was recorded from another version of the example "
                    f"(md5 {page.get('md5')} in {SHARD_MANIFEST}, {source_md5(source)} here). "
                    "Fix: re-record it from this version. Nothing was merged."
                )
            for other in claims.get(name, []):
                if other.gpu == shard.gpu:
                    raise ShardError(
                        f"shards {other.path} and {shard.path} both recorded {name} on {shard.gpu}. "
                        "Fix: keep one of them. Nothing was merged."
                    )
            claims.setdefault(name, []).append(shard)
    gallery, data = Path(docs_dir) / recording.GALLERY_NAME, Path(docs_dir) / "data"
    try:
        previous = read_manifest(gallery) or {}
        known = {_entry_key(e) for e in history.load(data / "history.jsonl")}
    except CorruptDataError as exc:
        raise ShardError(f"merge: the gallery's own data is corrupt: {exc}") from None
    full = _every_example(claims, Path(examples_dir))
    if not allow_other_environment:  # a full recording replaces the gallery's: its shards must agree among themselves
        _same_environment(shards, {} if full else previous, gallery / MANIFEST)
    # everything checked: build the new gallery beside the old one, in a fixed order
    sources = {name: _primary(claims[name], name) for name in sorted(claims)}
    # the copy lives in docs/_build: on the gallery's file system (one rename swaps it in), ignored by git,
    # and never read as pages by Sphinx, even when a merge killed outright leaves it behind
    build = Path(docs_dir) / "_build"
    made_build = not build.exists()
    build.mkdir(exist_ok=True)
    stage_root = Path(tempfile.mkdtemp(prefix="shards-merge-", dir=build))
    try:
        stage = stage_root / recording.GALLERY_NAME
        if gallery.is_dir():
            shutil.copytree(gallery, stage, symlinks=True)
        else:
            stage.mkdir()
        for name, primary in sources.items():
            stem = Path(name).stem
            for rel, stale in staging.page_files(stage, stem).items():
                if _owner(rel.as_posix(), [stem]) == stem:
                    stale.unlink()
            for rel in primary.page_files(name):
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                datafiles.write_bytes(stage / rel, primary.files[rel.as_posix()])
        manifest = _merged_manifest(previous, Path(examples_dir), shards, sources, full)
        datafiles.write_json(stage / MANIFEST, manifest, indent=1)
        _swap(stage, gallery)  # the gallery is new from here; the old one is removed with stage_root
    finally:
        shutil.rmtree(stage_root, ignore_errors=True)
        if made_build:
            with contextlib.suppress(OSError):  # a build started meanwhile writes there: keep it
                build.rmdir()
    entries = []
    for name in sorted(claims):
        stem = Path(name).stem
        if len(claims[name]) > 1:
            for shard in claims[name]:
                dest = data / BY_GPU / gpu_slug(shard.gpu) / f"{stem}{RECORD_SUFFIX}"
                dest.parent.mkdir(parents=True, exist_ok=True)
                datafiles.write_bytes(dest, shard.files[f"{stem}{RECORD_SUFFIX}"])
        for shard in claims[name]:
            entries += [e for e in shard.history_lines if e.get("example") == stem]
    entries.sort(key=lambda e: (str(e.get("recorded_utc")), str(e.get("gpu")), e["example"]))
    # a shard merged a second time adds no line (a duplicate would compare the recording with
    # itself); one widened again since (rewiden) puts its lines in place of the old ones
    history.replace(data / "history.jsonl", {_entry_key(e): e for e in entries if _entry_key(e) in known}, _entry_key)
    history.append(data / "history.jsonl", [e for e in entries if _entry_key(e) not in known])
    if full:
        # every page: a full recording, assembled from shards; does it reproduce the one before?
        lines = history.load(data / "history.jsonl")
        datafiles.write_json(data / recording.REPRODUCIBILITY, history.reproducibility(lines), indent=1)
        datafiles.write_json(data / drift_bands.DRIFT, drift_bands.drift(drift_bands.recordings(data)), indent=1)
    return {name: shard.gpu for name, shard in sources.items()}


def _software(environment: dict[str, Any]) -> dict[str, Any]:
    return {k: environment.get(k) for k in history.SOFTWARE_KEYS}


def _same_environment(shards: list[Shard], previous: dict[str, Any], manifest_path: Path) -> None:
    """Refuse a shard whose software or ``cudnn_guide`` differs from the gallery's (``previous``, its manifest),
    or from the first shard's when ``previous`` is empty; a value one side does not know is not compared."""
    if previous.get("environment"):
        env, package, where = previous["environment"], previous.get("package_md5"), f"the gallery ({manifest_path})"
    else:
        env, package, where = shards[0].environment, shards[0].package_md5, f"shard {shards[0].path}"
    for shard in shards:
        mine, theirs = _software(shard.environment), _software(env)
        differ = [f"{k} {mine[k]} vs {theirs[k]}" for k in mine if mine[k] and theirs[k] and mine[k] != theirs[k]]
        if shard.package_md5 and package and shard.package_md5 != package:
            differ.append(f"cudnn_guide package md5 {shard.package_md5} vs {package}")
        if differ:
            raise _refuse(
                shard.path,
                f"recorded with other software than {where}: {'; '.join(differ)}",
                "re-record it with the gallery's software, or merge with --allow-other-environment "
                "(each of its pages then names its own software in recording.json)",
            )


def _swap(new: Path, current: Path) -> None:
    """Put folder ``new`` in the place of ``current``, and ``current`` (if any) in the place of ``new``.

    One atomic exchange where the system has it (Linux's ``renameat2``), else three renames.
    """
    if not current.exists():
        os.rename(new, current)
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
        renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        at_fdcwd, rename_exchange = -100, 2
        if renameat2(at_fdcwd, os.fsencode(new), at_fdcwd, os.fsencode(current), rename_exchange) == 0:
            return
    except (OSError, AttributeError):  # no renameat2 in this C library: rename in three steps
        pass
    aside = new.with_name(new.name + ".old")
    os.rename(current, aside)
    try:
        os.rename(new, current)
    except BaseException:
        os.rename(aside, current)
        raise
    os.rename(aside, new)


def _every_example(pages: Any, examples_dir: Path) -> bool:
    """Whether ``pages`` (example file names) are every example: a full recording."""
    return set(pages) == {p.name for p in examples_dir.glob("plot_*.py")}


def _merged_manifest(
    previous: dict[str, Any], examples_dir: Path, shards: list[Shard], sources: dict[str, Shard], full: bool
) -> dict[str, Any]:
    """``recording.json`` after the merge: each merged page's GPU, commit, software, package and seconds (from
    the shard it is shown from: several shards may share a GPU model); md5s of the examples. The gallery's
    environment is the newest shard's of the GPU most pages show only when the shards are a full recording
    (or the gallery has none): a few pages never describe every page. A page whose example no longer
    exists (split or renamed: :mod:`gallery_build.page_moves`) leaves the manifest."""
    exists = {s.name for s in examples_dir.glob("plot_*.py")}  # a page split or renamed away leaves no entry
    pages = kept_pages(previous, exists)
    seconds = {k: v for k, v in previous.get("example_seconds", {}).items() if k in exists}
    for name, shard in sorted(sources.items()):
        pages[name] = page_entry(dict(shard.environment, gpu=shard.gpu), shard.package_md5, shard.turn_scope)
        seconds[name] = shard.pages[name].get("seconds") or 0.0
    by_gpu = {s.gpu: s for s in sorted(shards, key=lambda s: str(s.path))}
    main_gpu = max(sorted(by_gpu), key=lambda g: sum(1 for s in sources.values() if s.gpu == g))
    newest = max(
        (s for s in shards if s.gpu == main_gpu), key=lambda s: (str(s.environment.get("date_utc")), str(s.path))
    )
    data = dict(previous)
    data.update(
        {
            "example_seconds": seconds,
            "pages": pages,
            "examples": {s.name: source_md5(s) for s in sorted(examples_dir.glob("plot_*.py"))},
            # every source the pages come from: a partial merge keeps naming the pages it left as they were
            "merged_from": sorted({f"{s.gpu} @ {s.environment.get('commit')}" for s in shards} | page_sources(pages)),
        }
    )
    if isinstance(previous.get("last_run_seconds"), dict):
        data["last_run_seconds"] = {k: v for k, v in previous["last_run_seconds"].items() if k in exists}
    if full or not previous.get("environment"):
        data["environment"] = newest.environment  # the machine of the latest recording merged
        data["package_md5"] = newest.package_md5 or package_md5()  # the package that recorded it
    data.pop("recorded_utc", None)
    data["recorded_utc"] = max(str(s.environment.get("date_utc", "")) for s in shards)
    return data


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


def rewiden(shard: Path, drift_file: Path, every: bool = False) -> dict[str, int]:
    """Widen a shard's intervals by ``drift_file`` where its recording could not (before merging it).

    A shard recorded while the staged docs lacked ``data/drift.json`` holds every headline with
    ``drift: 0`` (:func:`gallery_build.drift_bands.rewiden_headlines`). Its records and its
    history lines are widened again, alike, by the drift file its recording should have read
    (the one committed when it ran), each file replaced atomically.

    Parameters
    ----------
    shard
        A shard folder (``shards record``'s output).
    drift_file
        The drift file to widen by.
    every
        Widen every headline again from its in-run interval, not only those widened by 0
        (:func:`gallery_build.drift_bands.rewiden_headlines`).

    Returns
    -------
    dict[str, int]
        Per page stem, how many headlines were widened again.

    Example
    -------
    >>> rewiden(Path("/tmp/shard_A"), Path("docs/data/drift.json"))  # doctest: +SKIP
    """
    bands = drift_bands.load_drift(Path(drift_file))
    if not bands:
        raise ShardError(
            f"rewiden: {drift_file} does not exist or is empty; name the drift file the shard should have used"
        )
    shard = Path(shard)
    widened: dict[str, int] = {}
    for path in sorted((shard / recording.GALLERY_NAME).glob(f"*{RECORD_SUFFIX}")):
        record = datafiles.read_json(path)
        stem = path.name[: -len(RECORD_SUFFIX)]
        widened[stem] = drift_bands.rewiden_headlines(record.get("headlines", []), bands, stem, every)
        datafiles.write_json(path, record, separators=(",", ":"))  # as the record hook writes it
    lines = shard / "history.jsonl"
    if lines.exists():
        entries = history.load(lines)
        for entry in entries:
            drift_bands.rewiden_headlines(entry.get("headlines", []), bands, entry["example"], every)
        datafiles.write_text(lines, "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries))
    return widened


def _main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(_USAGE)
        return
    if argv[:1] == ["record"] and len(argv) >= 2 and argv[1].startswith("-"):  # an option where SHARD_DIR goes
        raise SystemExit(f"cudnn-guide: shards record needs SHARD_DIR first, got {argv[1]!r}\n{_USAGE}")
    root = recording.REPO_ROOT
    recording.stop_on_sigterm()  # `timeout` ends a shard's recording like Ctrl-C: finished pages are kept
    if argv[:1] == ["merge"]:
        allow = ALLOW_OTHER_ENVIRONMENT in argv
        paths = [Path(p) for p in argv[1:] if p != ALLOW_OTHER_ENVIRONMENT]
        try:
            shown = merge(paths, root / "docs", root / "examples", allow_other_environment=allow)
        except ShardError as exc:
            print(f"cudnn-guide: shards merge refused: {exc}", file=sys.stderr)
            raise SystemExit(1) from None
        for name, gpu in shown.items():
            print(f"cudnn-guide: merged {name} (shown from {gpu})")
        report = root / "docs" / "data" / recording.REPRODUCIBILITY
        if _every_example(shown, root / "examples"):
            print(f"cudnn-guide: {history.format_reproducibility(datafiles.read_json(report))}")
        return
    if argv[:1] == ["rewiden"] and len([a for a in argv if a != "--all"]) >= 3:
        every, rest = "--all" in argv, [a for a in argv[1:] if a != "--all"]
        drift_file, paths = Path(rest[0]), [Path(p) for p in rest[1:]]
        try:
            for path in paths:
                counts = rewiden(path, drift_file, every)
                print(
                    f"cudnn-guide: {path}: widened again by {drift_file}: {sum(counts.values())} headline(s) "
                    f"on {sum(1 for n in counts.values() if n)} page(s)"
                )
        except ShardError as exc:
            print(f"cudnn-guide: shards rewiden refused: {exc}", file=sys.stderr)
            raise SystemExit(1) from None
        return
    if argv[:1] == ["record"] and len(argv) >= 2:
        shard, rest = Path(argv[1]), argv[2:]
        try:
            gpu_turns.turn_scope()  # a bad CUDNN_GUIDE_TURN_SCOPE stops here, not in every page
            recording.round_budget_override()  # and a bad CUDNN_GUIDE_ROUND_BUDGET_MS
            lanes, rest = recording.lanes_option(rest)
        except (recording.LanesError, ValueError) as exc:
            raise SystemExit(f"cudnn-guide: {exc}") from None
        keep_going = "--keep-going" in rest
        names = [a for a in rest if a != "--keep-going"]
        seconds = recording.record_examples(
            root / "docs",
            root / "examples",
            root / "docs" / recording.GALLERY_NAME,
            names=names or None,
            shard=shard,
            keep_going=keep_going,
            lanes=lanes,
        )
        then = (
            "an A/B of compare's round budget, never merged: read it with tools/round_budget_ab.py"
            if recording.round_budget_override() is not None
            else f"merge it with `python -m gallery_build.shards merge {shard} ...`"
        )
        print(f"cudnn-guide: shard {shard}: {len(seconds)} page(s); {then}")
        return
    raise SystemExit(_USAGE)


_USAGE = (
    "usage: python -m gallery_build.shards record SHARD_DIR [--keep-going] [--lanes N] [plot_xx.py ...]\n"
    f"       python -m gallery_build.shards merge [{ALLOW_OTHER_ENVIRONMENT}] SHARD_DIR [SHARD_DIR ...]\n"
    "       python -m gallery_build.shards rewiden [--all] DRIFT_JSON SHARD_DIR [SHARD_DIR ...]"
)


if __name__ == "__main__":  # pragma: no cover
    from gallery_build import shards

    shards._main()
