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

The rest hold one page's measuring machinery each, so that the page reads as its lesson and then
short "Measuring" cells: :mod:`~cudnn_guide.studies.autotuning` (plot_03),
:mod:`~cudnn_guide.studies.epilogue_fusion` (plot_04), :mod:`~cudnn_guide.studies.plan_serialization`
(plot_06), :mod:`~cudnn_guide.studies.cuda_graph_replay` (plot_08),
:mod:`~cudnn_guide.studies.attention_backward` (plot_09), :mod:`~cudnn_guide.studies.norm_training`
(plot_10), :mod:`~cudnn_guide.studies.batchnorm_stages` (plot_11),
:mod:`~cudnn_guide.studies.paged_kv_decode` (plot_13), :mod:`~cudnn_guide.studies.fp8_sweeps`
(plot_14), :mod:`~cudnn_guide.studies.grouped_query` (plot_16),
:mod:`~cudnn_guide.studies.attention_masks` (plot_18), :mod:`~cudnn_guide.studies.dropout_determinism`
(plot_20), :mod:`~cudnn_guide.studies.call_overhead` (plot_21),
:mod:`~cudnn_guide.studies.softcap_attention` (plot_24),
:mod:`~cudnn_guide.studies.custom_op_comparison` (plot_34), and for the others
:mod:`~cudnn_guide.studies.ceiling_sweeps` (plot_01), :mod:`~cudnn_guide.studies.conv_fusion` (plot_02),
:mod:`~cudnn_guide.studies.causal_attention` (plot_05), :mod:`~cudnn_guide.studies.kernel_cache_builds`
(plot_07), :mod:`~cudnn_guide.studies.varlen_race` (plot_17 and plot_32),
:mod:`~cudnn_guide.studies.flex_attention_race` (plot_19), :mod:`~cudnn_guide.studies.troubleshooting`
(plot_22), :mod:`~cudnn_guide.studies.block_training` (plot_25), :mod:`~cudnn_guide.studies.mla_training`
(plot_27), :mod:`~cudnn_guide.studies.first_call` (plot_28), :mod:`~cudnn_guide.studies.libcudnn_and_logs`
(plot_29) and :mod:`~cudnn_guide.studies.chunked_prefill` (plot_33).

A study may import the core; nothing in the core imports a study (``tests/test_layers.py``).
"""

__all__: list[str] = []  # the modules are the API: import them by name
