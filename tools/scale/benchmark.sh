#!/usr/bin/env bash
# Issue 18's benchmark: a fresh recording on the first GPUS GPUs, merged, then the site: each step timed.
#
#   tools/scale/benchmark.sh OUT GPUS [plot_xx.py ...]     (repository root, on the GPU machine)
#
# Writes OUT/shard (the recording, a shard), OUT/html (the site) and OUT/benchmark.json (the
# seconds of each step, and each page's). Every page starts with empty compile caches (gallery_build.recording),
# so a warm machine does not shorten it; run it on a fresh machine all the same.
set -uo pipefail
out=$1 gpus=$2
shift 2
mkdir -p "$out"
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD:$PWD/docs/_ext" PYTHONUNBUFFERED=1
CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((gpus - 1)))
export CUDA_VISIBLE_DEVICES
now() { date +%s.%N; }
# Each step's time is kept even when a later step fails (a stale page stops the site, say): the
# json then says which step failed, and has no total.
t0=$(now)
python3 -m gallery_build.shards record "$out/shard" --keep-going "$@"
record_rc=$?
t1=$(now)
merge_rc=skipped
[ -f "$out/shard/shard.json" ] && { python3 -m gallery_build.shards merge "$out/shard"; merge_rc=$?; }
t2=$(now)
site_rc=skipped
[ "$merge_rc" = 0 ] && { CUDNN_GUIDE_DOCS_MODE=render python3 -m sphinx -W --keep-going -q -j auto -b html docs "$out/html"; site_rc=$?; }
t3=$(now)
python3 - "$out/benchmark.json" "$gpus" "$t0" "$t1" "$t2" "$t3" "$record_rc" "$merge_rc" "$site_rc" "$@" <<'PY'
import json
import os
import sys

path, gpus = sys.argv[1], int(sys.argv[2])
t0, t1, t2, t3 = map(float, sys.argv[3:7])
codes = dict(zip(("record", "merge", "site"), sys.argv[7:10]))
pages = sys.argv[10:]
spans = {"record": t1 - t0, "merge": t2 - t1, "site": t3 - t2}
steps = {step: (spans[step] if code != "skipped" else None) for step, code in codes.items()}  # a failed step keeps its time
failed = {step: code for step, code in codes.items() if code != "0"}
shard_json = os.path.join(os.path.dirname(path), "shard", "shard.json")
shard = json.load(open(shard_json)) if os.path.exists(shard_json) else {"pages": {}}
per_page = {name: round(p.get("seconds") or 0.0, 1) for name, p in sorted(shard["pages"].items())}
result = {"gpus": gpus, "pages": pages or "all",
          "seconds": {**steps, **({} if failed else {"total": t3 - t0})},
          "page_seconds": round(sum(per_page.values()), 1), "per_page_seconds": per_page}
if failed:
    result["failed"] = {step: f"exit {code}" if code != "skipped" else "skipped: an earlier step failed"
                        for step, code in failed.items()}
json.dump(result, open(path, "w"), indent=1)
print("cudnn-guide benchmark:", json.dumps(result))
sys.exit(1 if failed else 0)
PY
