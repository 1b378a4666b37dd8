#!/usr/bin/env bash
# The site of the committed recording, built and timed on the GPU builder, as `nox -s docs` renders it.
#
#   CUDNN_GUIDE_COMMIT=<sha> bash tools/builder/site_call.sh NAME      (carry .whl)
#
# Sphinx needs babel, which tools/builder/wheelhouse.sh puts in the CuTe parks: make the park calls in the
# same lease first (or build the site in the lease that recorded). $OUT/host_site_NAME.txt: the call's clock
# (site0 to site1 is the Sphinx process) and the host loop before and after; $OUT/site_build_NAME.log: Sphinx's
# output, each line with its time.
name=$1; h=$OUT/host_site_$name.txt
stamp() { echo "$1 $(date +%s.%N)" >> "$h"; }
stamp start
source tools/builder/env.sh > "$OUT/install_site_$name.txt" 2>&1 || { cat "$OUT/install_site_$name.txt"; exit 2; }
python3 -c "import babel, sphinx" 2>/dev/null || { echo "site_call.sh: no babel: make the CuTe park calls in this lease first" >&2; exit 2; }
stamp installed
python3 -m timeit -n 2000000 'sum(range(10))' >> "$h"
stamp site0
PYTHONPATH=docs/_ext:.:$PYTHONPATH CUDNN_GUIDE_DOCS_MODE=render python3 -m sphinx -W --keep-going -j auto -b html \
  docs "/tmp/html_$name" 2>&1 | while IFS= read -r l || [ -n "$l" ]; do printf '%s %s\n' "$(date +%s.%3N)" "$l"; done \
  > "$OUT/site_build_$name.log"
echo "rc=${PIPESTATUS[0]}" >> "$h"
stamp site1
python3 -m timeit -n 2000000 'sum(range(10))' >> "$h"
cat "$h"; tail -3 "$OUT/site_build_$name.log"
