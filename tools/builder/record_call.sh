#!/usr/bin/env bash
# One recorder call on the GPU builder, traced and timed, its results in $OUT/NAME.tar.gz.
#
#   CUDNN_GUIDE_COMMIT=<sha> bash tools/builder/record_call.sh NAME LIMIT_S LANES [page ...]   (carry .whl; commit first)
#
# Records the pages (every page when none is named) into the shard /tmp/shard_NAME with --keep-going, under
# `timeout LIMIT_S` (its SIGTERM keeps the pages finished; keep LIMIT_S under the call's limit, 555 s of 600),
# with each page's GPU turns traced (CUDNN_GUIDE_TURN_TRACE, for tools/turn_timeline.py). $OUT/host_NAME.txt
# holds the call's clock at each step and the host loop's speed before and after the recorder (the builder's
# CPU speed moves within a lease: docs/data/host_speed_probe.json). Merge the shard here with
# `PYTHONPATH=docs/_ext:. python -m gallery_build.shards merge /tmp/x/shard_NAME`.
name=$1 limit=$2 lanes=$3; shift 3
h=$OUT/host_$name.txt
stamp() { echo "$1 $(date +%s.%N)" >> "$h"; }
stamp start
source tools/builder/env.sh > "$OUT/install_$name.txt" 2>&1 || { cat "$OUT/install_$name.txt"; exit 2; }
stamp installed
python3 -c "import torch; torch.ones(1, device='cuda'); torch.cuda.synchronize()"
stamp warm
python3 -m timeit -n 2000000 'sum(range(10))' >> "$h"
rm -rf "/tmp/shard_$name" "/tmp/trace_$name" "/tmp/log_$name.txt" "/tmp/timed_log_$name.txt"; mkdir -p "/tmp/trace_$name"
stamp rec0
# the log as the recorder wrote it (tools read it), and a copy with each line's time (where start-up and the tail go)
CUDNN_GUIDE_TURN_TRACE=/tmp/trace_$name PYTHONPATH=docs/_ext:.:$PYTHONPATH timeout -s TERM "$limit" \
  python3 -m gallery_build.shards record "/tmp/shard_$name" --keep-going --lanes "$lanes" "$@" 2>&1 \
  | while IFS= read -r l || [ -n "$l" ]; do printf '%s\n' "$l" >> "/tmp/log_$name.txt"; printf '%s %s\n' "$(date +%s.%3N)" "$l" >> "/tmp/timed_log_$name.txt"; done
echo "rc=${PIPESTATUS[0]}" >> "$h"
stamp rec1
python3 -m timeit -n 2000000 'sum(range(10))' >> "$h"
cp "$h" "/tmp/host_$name.txt"
tar czf "$OUT/$name.tar.gz" -C /tmp "shard_$name" "trace_$name" "log_$name.txt" "timed_log_$name.txt" "host_$name.txt"
stamp tarred
tail -3 "/tmp/log_$name.txt"; cat "$h"
