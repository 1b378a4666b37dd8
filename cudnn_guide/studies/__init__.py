"""Studies: measurements one page makes once, not tools a reader times their own graphs with.

The core (:mod:`~cudnn_guide.graphs`, :mod:`~cudnn_guide.check`, :mod:`~cudnn_guide.measure`,
:mod:`~cudnn_guide.report`) is what a reader imports for their own work. These modules each serve
the page that asks one question, and most of them answer it in fresh processes:

* :mod:`~cudnn_guide.studies.fresh_process` and its child side :mod:`~cudnn_guide.studies.interpreter`:
  run a function in a new interpreter (a pool of them, started ahead of time);
* :mod:`~cudnn_guide.studies.coldstart`: a graph's first result in a new process, built or loaded
  from a plan cache (the serialization and FlexAttention pages);
* :mod:`~cudnn_guide.studies.dynamic_shapes`: building a graph per shape, with and without the
  kernel cache (the kernel-cache page);
* :mod:`~cudnn_guide.studies.failures`: failures reproduced on purpose, where each one surfaces
  and the fix, and the frontend's log and plans (the troubleshooting and libcudnn-and-logs pages);
* :mod:`~cudnn_guide.studies.host_levels`: the host cost of each launch path, process by process
  (the CUDA-graphs page);
* :mod:`~cudnn_guide.studies.profiling`: the profiler's kernel times beside the harness's (the
  conv → bias → ReLU page, and ``tools/crosscheck.py``).

A study may import the core; nothing in the core imports a study (``tests/test_layers.py``).
"""

__all__: list[str] = []  # the modules are the API: import them by name
