# source tools/builder/env.sh: the wheelhouse's packages on the GPU builder, installed once per lease, with
# their bytecode. Later calls of a warm lease find both in /tmp and only set the environment.
if [ -z "${CUDNN_GUIDE_COMMIT:-}" ]; then  # the builder's copy of the tree has no .git: pages would say "unknown"
  echo "tools/builder/env.sh: set CUDNN_GUIDE_COMMIT=<the full sha you committed> in the call's command" >&2
  return 2 2>/dev/null || exit 2
fi
if [ -d /tmp/site/cudnn ] && [ -d /tmp/site/nvidia_cutlass_dsl ]; then
  export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 MPLBACKEND=Agg
  export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
else
  source .whl/install.sh
fi
# The builder's packages hold no bytecode and its Python may not write any (PYTHONDONTWRITEBYTECODE); a reader's
# install has it. So compile it once per lease into /tmp/pyc, as DEVELOPERS.md says: the recordings whose logs are
# kept (docs/data/recorder_logs, 4f40a0d to 23bd784) did; 8194830's, made without it, logged "Python may not write bytecode here" and its page interpreters
# were ready 18.6 s later than 23bd784's (measurement studies, "Three lanes, builds aside, on a fresh lease").
export PYTHONPYCACHEPREFIX=/tmp/pyc
unset PYTHONDONTWRITEBYTECODE
if [ ! -f /tmp/pyc/.compiled ]; then
  packages=$(python3 -c "import os, matplotlib, numpy, pandas, torch
print(' '.join(sorted({os.path.dirname(os.path.dirname(m.__file__)) for m in (matplotlib, numpy, pandas, torch)})))")
  python3 -m compileall -q -j 0 /tmp/site $packages > /dev/null 2>&1
  mkdir -p /tmp/pyc && touch /tmp/pyc/.compiled
fi
