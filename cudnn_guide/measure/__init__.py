"""Measure graphs honestly: timing, intervals, verdicts, and what bounds them.

* :mod:`~cudnn_guide.measure.bench`: :func:`~cudnn_guide.measure.bench.benchmark`, one callable
  timed with events; :mod:`~cudnn_guide.measure.events` holds its primitives (L2 flush, spin,
  launch cost);
* :mod:`~cudnn_guide.measure.measurement`: a timing's samples, median, interval and rates;
* :mod:`~cudnn_guide.measure.compare` and :mod:`~cudnn_guide.measure.verdicts`: interleaved
  comparisons, paired ratios, and verdicts against a measured tie band;
  :mod:`~cudnn_guide.measure.drift` widens them by the re-recording drift;
* :mod:`~cudnn_guide.measure.sweep`: one measurement per problem size and implementation;
* :mod:`~cudnn_guide.measure.ceilings`, :mod:`~cudnn_guide.measure.clocks`,
  :mod:`~cudnn_guide.measure.profiling`: the GPU's measured ceilings, its clock state, and the
  profiler's independent clock;
* :mod:`~cudnn_guide.measure.cudagraphs`, :mod:`~cudnn_guide.measure.autotune`,
  :mod:`~cudnn_guide.measure.baselines`: CUDA-graph timing, autotuning across plans, and fair
  PyTorch baselines;
* :mod:`~cudnn_guide.measure.fresh_process`, :mod:`~cudnn_guide.measure.coldstart`,
  :mod:`~cudnn_guide.measure.dynamic_shapes`: costs that only a fresh process shows.
"""

__all__: list[str] = []  # the modules are the API: import them by name
