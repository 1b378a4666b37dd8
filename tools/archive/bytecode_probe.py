"""What does compiling Python from source cost each page's process? Run on the GPU builder.

The builder's interpreter runs with ``PYTHONDONTWRITEBYTECODE=1`` and its site-packages hold no
bytecode, so every new process compiles what it imports. This times, in fresh processes, the
imports a page makes after ``torch`` (Dynamo, Inductor, Triton, the frontend), alternating the
builder's setting with :func:`gallery_build.staging.shared_bytecode` (its first run writes the
bytecode; the runs timed after it read it).

    PYTHONPATH=docs/_ext:. python3 tools/archive/bytecode_probe.py [docs/data/bytecode_probe.json]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gallery_build.staging import shared_bytecode

LAZY = (
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "torch._inductor.codegen.triton",
    "triton.compiler.compiler",
    "cudnn",
)
"""What a page with a ``torch.compile`` baseline imports after the interpreter's preload."""

CODE = "import time, torch; t = time.perf_counter(); import " + ", ".join(LAZY) + "; print(time.perf_counter() - t)"


def one(env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def main(out: Path, rounds: int = 3) -> dict:
    builder = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # the builder's setting, wherever the probe runs
    with tempfile.TemporaryDirectory() as tmp:
        shared = builder | shared_bytecode(Path(tmp) / "bytecode", dont_write=True)
        first_write = one(shared)
        runs: dict[str, list[float]] = {"compiled from source (the builder's setting)": [], "shared bytecode": []}
        for _ in range(rounds):  # alternating, so a drift of the host hits both
            runs["compiled from source (the builder's setting)"].append(one(builder))
            runs["shared bytecode"].append(one(shared))
    result = {
        "about": __doc__.split("\n\n")[0],
        "dont_write_bytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),  # this machine's own setting
        "imports": list(LAZY),
        "first_run_writing_bytecode_s": round(first_write, 3),
        "seconds": {k: [round(v, 3) for v in vs] for k, vs in runs.items()},
        "median_s": {k: round(statistics.median(vs), 3) for k, vs in runs.items()},
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/data/bytecode_probe.json"))
