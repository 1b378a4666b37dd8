"""Measure graphs honestly: timing, intervals, verdicts, and what bounds them.

* :mod:`~cudnn_guide.measure.bench`: :func:`~cudnn_guide.measure.bench.benchmark`, one callable
  timed with events (its settings: :class:`~cudnn_guide.measure.bench.BenchOptions`);
  :mod:`~cudnn_guide.measure.events` holds its primitives (L2 flush, spin, launch cost);
* :mod:`~cudnn_guide.measure.measurement`: a timing's samples, median, interval and rates;
* :mod:`~cudnn_guide.measure.compare` and :mod:`~cudnn_guide.measure.verdicts`: interleaved
  comparisons, paired ratios, and verdicts against a measured tie band, with the run's own
  (in-run) intervals;
* :mod:`~cudnn_guide.measure.sweep`: one measurement per problem size and implementation;
* :mod:`~cudnn_guide.measure.ceilings`, :mod:`~cudnn_guide.measure.clocks`: the GPU's measured
  ceilings and its clock state;
* :mod:`~cudnn_guide.measure.cudagraphs`, :mod:`~cudnn_guide.measure.autotune`,
  :mod:`~cudnn_guide.measure.baselines`: CUDA-graph timing, autotuning across plans, and fair
  PyTorch baselines.

Tables and plots of these results live in :mod:`cudnn_guide.report`; the one-page studies
(fresh processes, the profiler's clock) in :mod:`cudnn_guide.studies`.
"""

__all__: list[str] = []  # the modules are the API: import them by name
