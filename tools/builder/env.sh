# source tools/builder/env.sh: the wheelhouse's packages on the GPU builder, installed once per lease.
# Later calls of a warm lease find /tmp/site and only set the environment (install.sh takes about 10 s).
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
