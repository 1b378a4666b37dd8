#!/usr/bin/env bash
# Build the GPU builder's wheelhouse so that every call fits the device tool's 64 MiB transfer.
#
#   tools/builder/wheelhouse.sh [PARKS]     (from the repository root; PARKS: CuTe parks, default 3)
#
# ../shared/gpu-builder/make-wheelhouse.sh --cute .whl makes .whl (about 53 MiB) and two CuTe parks (about
# 53 MiB each). Each call carries the working tree's tracked files as well (23.5 MB at 8194830, growing with
# docs/data), so neither fits any more. This script moves the wheels the builder can do without (nox's
# virtualenv, hypothesis, distlib) out of .whl, moves babel (11 MB, which Sphinx needs) into the CuTe tarball
# that install.sh unpacks into the same /tmp/site, and splits that tarball into PARKS parks. It then checks
# that the tree plus .whl, and the tree plus each park, fit, and says what to do when they do not.
# On the builder: PARKS park calls (`bash .whl-park-N/install.sh`, carry .whl-park-N), each started within
# 30 s of the last one's end, then the real calls (carry .whl and tools/builder is in the tree):
# `source tools/builder/env.sh && ...`.
set -euo pipefail
parks=${1:-3}
limit=$((64 * 1024 * 1024))
[ -f pyproject.toml ] || { echo "wheelhouse.sh: run it from the repository root" >&2; exit 2; }
rm -rf .whl .whl-park-*
../shared/gpu-builder/make-wheelhouse.sh --cute .whl
for ignored in /.whl/ /.whl-park-*/ /.whl-aside/; do
  grep -qxF "$ignored" .git/info/exclude 2>/dev/null || echo "$ignored" >> .git/info/exclude
done
work=$(mktemp -d)
cat .whl-park-*/cute.tar.part-* | tar xf - -C "$work"
mkdir -p .whl-aside
mv .whl/virtualenv-* .whl/hypothesis-* .whl/distlib-* .whl-aside/ 2>/dev/null || true
mv .whl/babel-* "$work"/
rm -rf .whl-park-*
(cd "$work" && tar cf cute.tar ./*.whl && split -n "$parks" -d -a 2 cute.tar cute.tar.part-)
for i in $(seq 1 "$parks"); do
  park=".whl-park-$i"; mkdir -p "$park"
  mv "$work/cute.tar.part-$(printf '%02d' $((i - 1)))" "$park/"
  cp .whl/install.sh "$park/install.sh"; echo "$parks" > "$park/cute.parts"
done
echo "$parks" > .whl/cute.parts
rm -rf "$work"
tree=$(git ls-files -z | xargs -0 cat | wc -c)
ok=1
for carry in .whl .whl-park-*; do
  size=$(du -sb "$carry" | cut -f1)
  total=$((tree + size))
  printf '%s: %d MB with the tree (%d MB); the limit is %d MB\n' "$carry" $((total / 1000000)) $((tree / 1000000)) \
    $((limit / 1000000))
  [ "$total" -lt "$limit" ] || ok=0
done
if [ "$ok" != 1 ]; then
  echo "wheelhouse.sh: a call would not fit: run it again with more parks (tools/builder/wheelhouse.sh $((parks + 1)))" >&2
  exit 1
fi
echo "wheelhouse: .whl and $parks CuTe park(s) fit; the set-aside wheels are in .whl-aside (not carried)"
