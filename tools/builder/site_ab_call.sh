#!/usr/bin/env bash
# An A/B of the site build on the GPU builder: Sphinx's own parallel writing against gallery_build.resolve_in_workers.
#
#   bash tools/builder/site_ab_call.sh ROUNDS      (carry .whl; babel parked first in /tmp/babel by a call that
#                                                   carries .whl-babel: mkdir -p /tmp/babel && cp .whl-babel/*.whl /tmp/babel/)
#
# Installs the wheelhouse and babel, builds the site once to warm the disk cache (not counted), then builds the
# committed recording's site in render mode 2 x ROUNDS times, in ABBA order (sphinx, workers, workers, sphinx, ...):
# Sphinx's own writing (CUDNN_GUIDE_RESOLVE_IN_MAIN=1) and the workers' (unset), each into a new folder.
# $OUT/site_ab.txt: each build's arm and its Sphinx process's seconds, with the host loop before and after each;
# $OUT/site_ab_ARM_N.log: each build's output, every line with its time.
rounds=${1:?usage: site_ab_call.sh ROUNDS}
: "${OUT:?the device tool sets OUT}"
h=$OUT/site_ab.txt
source .whl/install.sh > "$OUT/install_site_ab.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/babel/*.whl >> "$OUT/install_site_ab.txt" 2>&1
python3 -c "import babel, sphinx" 2>/dev/null || { echo "site_ab_call.sh: no babel: park it in /tmp/babel first" >&2; exit 2; }
loop() { python3 -m timeit -n 2000000 'sum(range(10))' | sed 's/.*best of 5: //'; }
order="warmup"
for n in $(seq 1 "$rounds"); do
  if [ $((n % 2)) -eq 1 ]; then order="$order sphinx workers"; else order="$order workers sphinx"; fi
done
n=0
for arm in $order; do
    n=$((n + 1))
    rm -rf /tmp/jupyter_execute /tmp/.jupyter_cache docs/jupyter_execute "/tmp/html_ab"
    before=$(loop)
    t0=$(date +%s.%N)
    if [ "$arm" != workers ]; then export CUDNN_GUIDE_RESOLVE_IN_MAIN=1; else unset CUDNN_GUIDE_RESOLVE_IN_MAIN; fi
    PYTHONPATH=docs/_ext:.:$PYTHONPATH CUDNN_GUIDE_DOCS_MODE=render python3 -m sphinx -W --keep-going -j auto -b html \
      docs /tmp/html_ab 2>&1 | while IFS= read -r l || [ -n "$l" ]; do printf '%s %s\n' "$(date +%s.%3N)" "$l"; done \
      > "$OUT/site_ab_${arm}_$n.log"
    rc=${PIPESTATUS[0]}
    t1=$(date +%s.%N)
    echo "$arm $n rc=$rc seconds=$(python3 -c "print(round($t1 - $t0, 2))") loop_before=$before loop_after=$(loop)" >> "$h"
done
unset CUDNN_GUIDE_RESOLVE_IN_MAIN
cat "$h"
