#!/usr/bin/env bash
# Issue 18's benchmark: a fresh recording on the first GPUS GPUs, merged, then the site: each step timed.
#
#   tools/scale/benchmark.sh OUT GPUS [plot_xx.py ...]     (repository root, on the GPU machine)
#
# Writes OUT/shard (the recording, a shard), OUT/html (the site) and OUT/benchmark.json (the
# seconds of each step, and each page's). Every page starts with empty compile caches (gallery_build.recording),
# so a warm machine does not shorten it; run it on a fresh machine all the same.
set -euo pipefail
out=$1 gpus=$2
shift 2
mkdir -p "$out"
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD:$PWD/docs/_ext" PYTHONUNBUFFERED=1
CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((gpus - 1)))
export CUDA_VISIBLE_DEVICES
now() { date +%s.%N; }
t0=$(now)
python3 -m gallery_build.shards record "$out/shard" --keep-going "$@"
t1=$(now)
python3 -m gallery_build.shards merge "$out/shard"
t2=$(now)
CUDNN_GUIDE_DOCS_MODE=render python3 -m sphinx -W --keep-going -q -j auto -b html docs "$out/html"
t3=$(now)
python3 - "$out/benchmark.json" "$gpus" "$t0" "$t1" "$t2" "$t3" "$@" <<'PY'
import json
import sys

path, gpus, (t0, t1, t2, t3), pages = sys.argv[1], int(sys.argv[2]), map(float, sys.argv[3:7]), sys.argv[7:]
steps = {"record": t1 - t0, "merge": t2 - t1, "site": t3 - t2}
shard = json.load(open(path.rsplit("/", 1)[0] + "/shard/shard.json"))
per_page = {name: round(p.get("seconds") or 0.0, 1) for name, p in sorted(shard["pages"].items())}
result = {"gpus": gpus, "pages": pages or "all", "seconds": {**steps, "total": t3 - t0},
          "page_seconds": round(sum(p.get("seconds") or 0.0 for p in shard["pages"].values()), 1),
          "per_page_seconds": per_page}
json.dump(result, open(path, "w"), indent=1)
print("cudnn-guide benchmark:", json.dumps(result))
PY
