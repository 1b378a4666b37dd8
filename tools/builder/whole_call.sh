#!/usr/bin/env bash
# The whole site fresh in one call on the GPU builder: record every page, merge the shard, build the site.
#
#   CUDNN_GUIDE_COMMIT=<sha> bash tools/builder/whole_call.sh NAME LIMIT_S LANES     (carry .whl; commit first)
#
# What a reader's `nox -s docs` does with a GPU, timed end to end in one lease: tools/builder/record_call.sh
# (its $OUT/NAME.tar.gz: shard, traces, recorder log, host readings), then `gallery_build.shards merge` of that
# shard into this call's copy of the tree, then the Sphinx build site_call.sh times. Sphinx needs babel, from the
# CuTe parks: make the park calls in this lease first. $OUT/whole_NAME.txt has the call's clock at each step
# (rec0 to rec1: the recorder; merge0 to merge1: the merge; site0 to site1: Sphinx); $OUT/site_build_NAME.log is
# Sphinx's output, each line with its time. Keep LIMIT_S (the recorder's) under about 520 s of the call's 600.
name=$1 limit=$2 lanes=$3
if [ -z "${CUDNN_GUIDE_COMMIT:-}" ]; then  # before anything is installed or recorded
  echo "tools/builder/whole_call.sh: set CUDNN_GUIDE_COMMIT=<the full sha you committed> in the call's command" >&2
  exit 2
fi
w=$OUT/whole_$name.txt
stamp() { echo "$1 $(date +%s.%N)" >> "$w"; }
stamp start
bash tools/builder/record_call.sh "$name" "$limit" "$lanes" > "$OUT/record_$name.txt" 2>&1
grep -E '^(rec0|rec1|rc=)' "$OUT/host_$name.txt" >> "$w"
source tools/builder/env.sh > /dev/null 2>&1 || exit 2
python3 -c "import babel, sphinx" 2>/dev/null || { echo "whole_call.sh: no babel: make the CuTe park calls in this lease first" >&2; exit 2; }
stamp merge0
PYTHONPATH=docs/_ext:.:$PYTHONPATH python3 -m gallery_build.shards merge "/tmp/shard_$name" > "$OUT/merge_$name.txt" 2>&1
echo "merge rc=$?" >> "$w"
stamp merge1
stamp site0
PYTHONPATH=docs/_ext:.:$PYTHONPATH CUDNN_GUIDE_DOCS_MODE=render python3 -m sphinx -W --keep-going -j auto -b html \
  docs "/tmp/html_$name" 2>&1 | while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%3N)" "$l"; done \
  > "$OUT/site_build_$name.log"
echo "site rc=${PIPESTATUS[0]}" >> "$w"
stamp site1
python3 -m timeit -n 2000000 'sum(range(10))' >> "$w"
tail -2 "$OUT/record_$name.txt"; tail -2 "$OUT/merge_$name.txt"; tail -2 "$OUT/site_build_$name.log"; cat "$w"
