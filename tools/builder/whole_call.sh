#!/usr/bin/env bash
# The whole site fresh in one call on the GPU builder: record every page, merge the shard, build the site.
#
#   CUDNN_GUIDE_COMMIT=<sha> bash tools/builder/whole_call.sh NAME LIMIT_S LANES     (carry .whl; commit first)
#
# What a reader's `nox -s docs` does with a GPU, timed end to end in one lease: tools/builder/record_call.sh
# (its $OUT/NAME.tar.gz: shard, traces, recorder log, host readings), then `gallery_build.shards merge` of that
# shard into this call's copy of the tree, then the Sphinx build site_call.sh times. Sphinx needs babel, from the
# CuTe parks: make the park calls in this lease first. $OUT/whole_NAME.txt has the call's clock at each step
# (rec0 to rec1: the recorder; merge0 to merge1: the merge; site0 to site1: Sphinx) and each step's exit status;
# $OUT/site_build_NAME.log is Sphinx's output, each line with its time. A recorder that failed or was cut (its
# rc is not 0) is neither merged nor built: its finished pages are in the shard, and the call exits with that rc.
# The call exits with the first step's failure, else 0. Keep LIMIT_S (the recorder's) under about 520 s of 600.
name=${1:?usage: whole_call.sh NAME LIMIT_S LANES} limit=${2:?LIMIT_S} lanes=${3:?LANES}
: "${OUT:?the device tool sets OUT}"
if [ -z "${CUDNN_GUIDE_COMMIT:-}" ]; then  # before anything is installed or recorded
  echo "tools/builder/whole_call.sh: set CUDNN_GUIDE_COMMIT=<the full sha you committed> in the call's command" >&2
  exit 2
fi
w=$OUT/whole_$name.txt
stamp() { echo "$1 $(date +%s.%N)" >> "$w"; }
stamp start
bash tools/builder/record_call.sh "$name" "$limit" "$lanes" > "$OUT/record_$name.txt" 2>&1
record_rc=$?
grep -E '^(rec0|rec1|rc=)' "$OUT/host_$name.txt" >> "$w" 2>/dev/null
recorder_rc=$(sed -n 's/^rc=//p' "$OUT/host_$name.txt" 2>/dev/null | tail -1)
if [ "$record_rc" -ne 0 ] || [ "${recorder_rc:-1}" -ne 0 ]; then
  echo "whole_call.sh: the recorder call ended with rc=${recorder_rc:-none} (script rc=$record_rc): not merged, no site" | tee -a "$w" >&2
  tail -5 "$OUT/record_$name.txt" >&2
  [ "$record_rc" -ne 0 ] && exit "$record_rc"
  exit "${recorder_rc:-1}"
fi
if ! source tools/builder/env.sh > "$OUT/env_$name.txt" 2>&1; then
  echo "whole_call.sh: tools/builder/env.sh failed:" >&2; cat "$OUT/env_$name.txt" >&2; exit 2
fi
python3 -c "import babel, sphinx" 2>/dev/null || { echo "whole_call.sh: no babel: make the CuTe park calls in this lease first" >&2; exit 2; }
stamp merge0
PYTHONPATH=docs/_ext:.:$PYTHONPATH python3 -m gallery_build.shards merge "/tmp/shard_$name" > "$OUT/merge_$name.txt" 2>&1
merge_rc=$?
echo "merge rc=$merge_rc" >> "$w"
stamp merge1
if [ "$merge_rc" -ne 0 ]; then
  echo "whole_call.sh: the merge failed (rc=$merge_rc): no site" >&2; tail -5 "$OUT/merge_$name.txt" >&2; exit "$merge_rc"
fi
stamp site0
PYTHONPATH=docs/_ext:.:$PYTHONPATH CUDNN_GUIDE_DOCS_MODE=render python3 -m sphinx -W --keep-going -j auto -b html \
  docs "/tmp/html_$name" 2>&1 | while IFS= read -r l || [ -n "$l" ]; do printf '%s %s\n' "$(date +%s.%3N)" "$l"; done \
  > "$OUT/site_build_$name.log"
site_rc=${PIPESTATUS[0]}
echo "site rc=$site_rc" >> "$w"
stamp site1
python3 -m timeit -n 2000000 'sum(range(10))' >> "$w"
tail -2 "$OUT/record_$name.txt"; tail -2 "$OUT/merge_$name.txt"; tail -2 "$OUT/site_build_$name.log"; cat "$w"
exit "$site_rc"
