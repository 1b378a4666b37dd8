#!/usr/bin/env bash
# Issue 18's benchmark: a fresh recording on the first GPUS GPUs, merged, then the site: each step timed.
#
#   tools/scale/benchmark.sh OUT GPUS [plot_xx.py ...]     (repository root, on the GPU machine)
#
# Writes OUT/shard (the recording, a shard), OUT/html (the site) and OUT/benchmark.json (the
# seconds of each step, and each page's; rewritten after every step). Every page starts with empty compile caches (gallery_build.recording),
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
# json then says which step failed, and has no total. It is written after every step, so a run
# stopped from outside (a device call's time limit) keeps the steps it finished.
write() {
  python3 - "$out/benchmark.json" "$gpus" "$t0" "$t1" "$t2" "$t3" "$record_rc" "$merge_rc" "$site_rc" "$@" <<'PY'
import json
import os
import sys

path, gpus = sys.argv[1], int(sys.argv[2])
times = [float(t) if t else None for t in sys.argv[3:7]]
codes = dict(zip(("record", "merge", "site"), sys.argv[7:10]))
pages = sys.argv[10:]
spans = {step: (times[i + 1] - times[i] if times[i + 1] is not None else None) for i, step in enumerate(codes)}
steps = {step: (spans[step] if code not in ("skipped", "unfinished") else None) for step, code in codes.items()}
failed = {step: code for step, code in codes.items() if code != "0"}
shard_json = os.path.join(os.path.dirname(path), "shard", "shard.json")
shard = json.load(open(shard_json)) if os.path.exists(shard_json) else {"pages": {}}
per_page = {name: round(p.get("seconds") or 0.0, 1) for name, p in sorted(shard["pages"].items())}
result = {"gpus": gpus, "pages": pages or "all",
          "seconds": {**steps, **({} if failed else {"total": times[3] - times[0]})},
          "page_seconds": round(sum(per_page.values()), 1), "per_page_seconds": per_page}
why = {"skipped": "skipped: an earlier step failed", "unfinished": "not finished: the run was stopped before this step ended"}
if failed:
    result["failed"] = {step: why.get(code, f"exit {code}") for step, code in failed.items()}
json.dump(result, open(path, "w"), indent=1)
if "unfinished" not in codes.values():
    print("cudnn-guide benchmark:", json.dumps(result))
sys.exit(1 if failed else 0)
PY
}
t0=$(now) t1= t2= t3=
record_rc=unfinished merge_rc=unfinished site_rc=unfinished
python3 -m gallery_build.shards record "$out/shard" --keep-going "$@"
record_rc=$?
t1=$(now)
write "$@"
merge_rc=skipped
[ -f "$out/shard/shard.json" ] && { merge_rc=unfinished; python3 -m gallery_build.shards merge "$out/shard"; merge_rc=$?; }
t2=$(now)
write "$@"
site_rc=skipped
[ "$merge_rc" = 0 ] && { site_rc=unfinished; CUDNN_GUIDE_DOCS_MODE=render python3 -m sphinx -W --keep-going -q -j auto -b html docs "$out/html"; site_rc=$?; }
t3=$(now)
write "$@"
