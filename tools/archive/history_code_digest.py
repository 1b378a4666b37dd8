"""Give every history line the digest of the example code it ran, read from git at its commit.

Lines written since the recorder records it carry ``code_md5``
(:func:`gallery_build.history.code_digest`). Older lines get it here from ``git show
COMMIT:examples/EXAMPLE.py``; a line whose commit or file git does not have keeps none (and stays
comparable with its neighbours, as before). Rewrites ``docs/data/history.jsonl`` and the
histories kept off the site (``docs/data/*.history.jsonl``) in place, each line otherwise unchanged.

    PYTHONPATH=docs/_ext:. python tools/archive/history_code_digest.py [DATA_DIR]
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from gallery_build.history import code_digest

from cudnn_guide import datafiles

ROOT = Path(__file__).resolve().parents[2]


def git_source(commit: str, example: str) -> str | None:
    """``examples/<example>.py`` at ``commit``, or ``None`` where git has neither."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:examples/{example}.py"], capture_output=True, text=True
    )
    return done.stdout if done.returncode == 0 else None


def backfill(path: Path, source_at: Callable[[str, str], str | None] = git_source) -> tuple[int, int]:
    """Add ``code_md5`` to the lines of one history file that lack it; return (added, left without)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, added, missing, seen = [], 0, 0, {}
    for line in lines:
        if not line.strip():
            out.append(line)
            continue
        entry = json.loads(line)
        if "code_md5" not in entry:
            key = (str(entry.get("commit") or ""), entry["example"])
            if key not in seen:
                source = source_at(*key) if key[0] else None
                seen[key] = code_digest(source) if source is not None else None
            if seen[key]:
                entry["code_md5"] = seen[key]
                line = json.dumps(entry, separators=(",", ":"))  # as history.append writes it
                added += 1
            else:
                missing += 1
        out.append(line)
    datafiles.write_text(path, "\n".join(out) + "\n")
    return added, missing


def main(data_dir: Path = ROOT / "docs" / "data") -> dict[str, tuple[int, int]]:
    done = {}
    for path in sorted(Path(data_dir).glob("*history.jsonl")):
        done[path.name] = backfill(path)
        print(f"{path.name}: {done[path.name][0]} lines given a code digest, {done[path.name][1]} left without")
    return done


if __name__ == "__main__":
    main(*(Path(a) for a in sys.argv[1:2]))
