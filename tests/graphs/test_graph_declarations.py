"""The training, norm, decode and FP8 graphs are declared with the right operations, ports and
attributes: checked on the CPU by declaring each graph (without building it) and reading its nodes.

Building and running them needs a GPU (the ``gpu`` tests at the end of this file); these catch wiring
mistakes in CI.
"""

import contextlib
from unittest import mock

import cudnn
import pytest
import torch

from cudnn_guide import check
from cudnn_guide.graphs import attention, batchnorm, conv, conv_training, fp8, matmul, norms, paged, tensors


def new_graph(problem, name, handle, graph_kwargs):
    return cudnn.pygraph(
        name=name,
        io_data_type=tensors.cudnn_dtype(problem.torch_dtype),
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    ), None


def _graph_tensor(g, t, name):  # as tensors.graph_tensor, but accepting CPU tensors
    return g.tensor(name=name, dim=list(t.shape), stride=list(t.stride()), data_type=tensors.cudnn_dtype(t.dtype))


def _output_like(node_output, t):
    return (
        node_output.set_output(True)
        .set_data_type(tensors.cudnn_dtype(t.dtype))
        .set_dim(list(t.shape))
        .set_stride(list(t.stride()))
    )


class _Declared:
    """What ``graphs.build`` returns, without building: the declared graph (its nodes) and the named tensors."""

    def __init__(self, graph, io):
        self.graph, self.io = graph, dict(io or {})

    def __getattr__(self, name):
        return getattr(self.graph, name)


@pytest.fixture
def declare():
    """``declare(module)``: its graph builders declare on the CPU and return the unbuilt pygraph."""
    with contextlib.ExitStack() as stack:

        def use(module):
            for target, name, value in (
                (module, "new_graph", new_graph),
                (module.tensors, "graph_tensor", _graph_tensor),
                (module.tensors, "output_like", _output_like),
                (module.graphs, "build", lambda g, io=None, **kw: _Declared(g, io)),
            ):
                stack.enter_context(mock.patch.object(target, name, value))

        yield use


def _nodes(fused):
    return {n.name: n for n in fused.nodes}


def empty(*shape, dtype=torch.bfloat16, nhwc=False):
    t = torch.empty(*shape, dtype=dtype)
    return tensors.nhwc(t) if nhwc else t


def test_conv_training_graphs(declare):
    declare(conv_training)
    p = conv.ConvProblem(n=2, c=8, h=8, w=8, k=16)
    x, w, y = empty(2, 8, 8, 8, nhwc=True), empty(16, 8, 3, 3, nhwc=True), empty(2, 16, 8, 8, nhwc=True)
    ins = {"x": x, "w": w, "y": y, "dy": y, "dx": x, "dw": w}
    for fn, op, ports, out in (
        (conv_training.conv_fprop_graph, "conv_fprop", {"image", "weight"}, "y"),
        (conv_training.conv_dgrad_graph, "conv_dgrad", {"loss", "filter"}, "dx"),
        (conv_training.conv_wgrad_graph, "conv_wgrad", {"image", "loss"}, "dw"),
    ):
        f = fn(p, ins)
        (node,) = f.nodes
        assert node.name == op and set(node.inputs) == ports
        assert node.params == {"padding": [1, 1], "stride": [1, 1], "dilation": [1, 1]}
        assert out in f.io


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("residual", [False, True])
def test_norm_forward_saves_statistics_in_training(declare, kind, residual):
    declare(norms)
    p = norms.NormProblem(tokens=4, hidden=16, kind=kind, residual=residual)
    ins = {
        "x": empty(4, 16),
        "r": empty(4, 16),
        "s": empty(4, 16),
        "y": empty(4, 16),
        "scale": empty(16),
        "bias": empty(16),
        "mean": empty(4, 1, dtype=torch.float32),
        "inv_var": empty(4, 1, dtype=torch.float32),
    }
    f = norms.norm_forward_graph(p, ins, training=True)
    nodes = _nodes(f)
    norm = nodes[f"{kind}norm"]
    assert norm.params["norm_forward_phase"] == cudnn.norm_forward_phase.TRAINING
    expected = {"input", "scale", "epsilon"} | ({"bias"} if kind == "layer" else set())
    assert set(norm.inputs) == expected
    assert {"y", "inv_var"} <= set(f.io) and (("mean" in f.io) == (kind == "layer"))
    if residual:
        assert (
            "residual_add" in nodes and norm.inputs["input"] is f.io["s"]
        )  # the sum is both the norm's input and an output


def test_rmsnorm_backward_has_no_bias_gradient(declare):
    declare(norms)
    p = norms.NormProblem(tokens=4, hidden=16, kind="rms")
    ins = {
        "dy": empty(4, 16),
        "x": empty(4, 16),
        "scale": empty(16),
        "inv_var": empty(4, 1, dtype=torch.float32),
        "dx": empty(4, 16),
        "dscale": empty(16),
    }
    f = norms.norm_backward_graph(p, ins)
    (node,) = f.nodes
    assert node.params.get("has_dbias") is False and "dbias" not in f.io


def test_batchnorm_training_updates_running_stats_and_inference_is_folded(declare):
    declare(batchnorm)
    p = batchnorm.BatchNormProblem(n=2, c=8, h=4, w=4)
    per_c = {
        n: empty(1, 8, 1, 1, dtype=torch.float32)
        for n in ("scale", "bias", "running_mean", "running_var", "mean", "inv_var", "a", "b")
    }
    ins = {
        "x": empty(2, 8, 4, 4, dtype=torch.float16, nhwc=True),
        "y": empty(2, 8, 4, 4, dtype=torch.float16, nhwc=True),
    } | per_c
    f = batchnorm.batchnorm_relu_graph(p, ins, training=True)
    assert set(_nodes(f)["batchnorm"].inputs) == {
        "input",
        "scale",
        "bias",
        "in_running_mean",
        "in_running_var",
        "epsilon",
        "momentum",
    }
    assert {"next_running_mean", "next_running_var", "mean", "inv_var"} <= set(f.io)
    folded = batchnorm.folded_batchnorm_relu_graph(p, ins)
    assert [n.name for n in folded.nodes] == ["scale", "shift", "relu"]


def test_attention_training_pair(declare):
    declare(attention)
    p = attention.SdpaProblem(batch=1, heads=2, seq=8, head_dim=16, causal=True)
    t = empty(1, 2, 8, 16)
    ins = {n: t for n in ("q", "k", "v", "o", "d_o", "dq", "dk", "dv")} | {
        "stats": empty(1, 2, 8, 1, dtype=torch.float32)
    }
    fwd = attention.sdpa_forward_training_graph(p, ins)
    (node,) = fwd.nodes
    assert node.params["generate_stats"] is True and node.params["diagonal_band_right_bound"] == 0
    bwd = attention.sdpa_backward_graph(p, ins)
    (node,) = bwd.nodes
    assert set(node.inputs) == {"q", "k", "v", "o", "dO", "stats"} and node.params["attn_scale"] == p.scale


def test_paged_decode_reads_pools_through_the_table(declare):
    declare(paged)
    p = paged.PagedDecodeProblem(batch=2, heads=2, head_dim=16, max_context=64, page_size=16)
    i32 = dict(dtype=torch.int32)
    ins = {
        "q": empty(2, 2, 1, 16),
        "o": empty(2, 2, 1, 16),
        "k_pool": empty(8, 2, 16, 16),
        "v_pool": empty(8, 2, 16, 16),
        "page_table": empty(2, 1, 4, 1, **i32),
        "seq_len_q": empty(2, 1, 1, 1, **i32),
        "seq_len_kv": empty(2, 1, 1, 1, **i32),
    }
    f = paged.paged_decode_graph(p, ins)
    (node,) = f.nodes
    assert node.params["use_padding_mask"] is True and node.params["paged_attention_max_seq_len_kv"] == 64
    assert node.params["generate_stats"] is False


def test_fp8_attention_uses_the_fp8_band_keyword(declare):
    declare(fp8)
    p = attention.SdpaProblem(batch=1, heads=2, seq=8, head_dim=16, causal=True)
    e4m3 = torch.float8_e4m3fn
    one = empty(1, 1, 1, 1, dtype=torch.float32)
    ins = {
        "q8": empty(1, 2, 8, 16, dtype=e4m3),
        "k8": empty(1, 2, 8, 16, dtype=e4m3),
        "v8": empty(1, 2, 8, 16, dtype=e4m3),
        "o8": empty(1, 2, 8, 16, dtype=e4m3),
    } | {n: one for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o", "amax_s", "amax_o")}
    f = fp8.sdpa_fp8_graph(p, ins)
    (node,) = f.nodes
    assert (
        node.params["right_bound"] == 0 and "diagonal_band_right_bound" not in node.params
    )  # sdpa_fp8's C++ binding has no such keyword


# -- the pages' inline declarations and the package's recipes declare the same graph ---------------
#
# A teaching page writes its graph out with the frontend's own calls; the package keeps the same
# graph as a recipe for the pages and tools that reuse it. Each test below runs the page's own
# source (its functions, read from the example file) on the CPU with meta tensors and the build
# steps stubbed out, declares the recipe the same way, and compares every node: operation,
# parameters, ports, and each tensor's name, dims, strides and dtype.

import ast  # noqa: E402
import pathlib  # noqa: E402
import types  # noqa: E402

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
BUILD_STEPS = ("validate", "build_operation_graph", "create_execution_plans", "check_support", "build_plans", "build")


def _page(page, names):
    """The page's top-level functions and assignments named in ``names``, run with ``cudnn.pygraph``
    making graphs whose build steps only freeze them (so a declaration after the build fails here as
    on the GPU); returns the namespace and the graphs made."""
    made = []

    def pygraph(*args, handle=None, **kwargs):
        g = cudnn.pygraph(*args, **kwargs)
        for step in BUILD_STEPS:  # no GPU here: a build step only freezes the graph, as the real one does
            setattr(g, step, lambda *a, g=g, **k: g._freeze())
        made.append(g)
        return g

    shim = types.SimpleNamespace(**{n: getattr(cudnn, n) for n in dir(cudnn) if not n.startswith("__")})
    shim.pygraph = pygraph
    tree = ast.parse((EXAMPLES / page).read_text())
    picked = [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef) and node.name in names)
        or (isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets))
    ]
    assert {getattr(n, "name", None) or n.targets[0].id for n in picked} == set(names), f"{page} lacks one of {names}"
    namespace = {"cudnn": shim, "torch": torch, "handle": None}
    exec(compile(ast.Module(picked, []), str(EXAMPLES / page), "exec"), namespace)
    return namespace, made


def _tensor(t):
    dtype = t.get_data_type()
    return (t.get_name(), tuple(t.get_dim() or ()), tuple(t.get_stride() or ()), None if dtype is None else str(dtype))


def _signature(graph):
    return [  # a node's name is a label (the frontend numbers unnamed ones): what it computes is the rest
        (
            str(n.node_type),
            sorted((k, repr(v)) for k, v in n.params.items()),
            sorted((port, _tensor(t)) for port, t in n.inputs.items()),
            sorted((port, _tensor(t)[1:]) for port, t in n.outputs.items()),  # names of virtual outputs may differ
        )
        for n in graph.nodes
    ]


def meta(*shape, dtype=torch.bfloat16, nhwc=False):
    t = torch.empty(*shape, dtype=dtype, device="meta")
    return t.to(memory_format=torch.channels_last) if nhwc else t


def test_plot_02_declares_the_conv_bias_relu_recipe(declare):
    declare(conv)
    p = conv.ConvProblem(n=2, c=8, h=8, w=8, k=16)
    ins = {
        "x": meta(2, 8, 8, 8, nhwc=True),
        "w": meta(16, 8, 3, 3, nhwc=True),
        "b": meta(1, 16, 1, 1, nhwc=True),
        "y": meta(2, 16, 8, 8, nhwc=True),
    }
    ns, _ = _page("plot_02_conv_bias_relu.py", {"declare_conv_bias_relu"})
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, compute_data_type=cudnn.data_type.FLOAT)
    ns["declare_conv_bias_relu"](g, **ins, padding=p.padding, stride=p.stride)
    assert _signature(g) == _signature(conv.conv_bias_relu_graph(p, ins))


def test_plot_04_declares_the_matmul_epilogue_recipe(declare):
    declare(matmul)
    p = matmul.MatmulProblem(batch=2, m=16, k=32, n=16)
    ins = {"a": meta(2, 16, 32), "b": meta(2, 32, 16), "bias": meta(1, 1, 16), "y": meta(2, 16, 16)}
    ins["amax"] = meta(1, 1, 1, dtype=torch.float32)
    ns, made = _page("plot_04_matmul_epilogue.py", {"FLOAT", "matmul_epilogue"})
    _, pack = ns["matmul_epilogue"](**ins, alpha=p.alpha)
    assert _signature(made[0]) == _signature(matmul.matmul_epilogue_graph(p, ins))
    assert len(pack) == 6  # a, b, bias, alpha (a host tensor), y, amax


def test_plot_05_declares_the_sdpa_recipe(declare):
    declare(attention)
    p = attention.SdpaProblem(batch=1, heads=2, seq=8, head_dim=16, causal=True)
    ins = {n: meta(1, 2, 8, 16) for n in ("q", "k", "v", "o")}
    ns, made = _page("plot_05_sdpa_causal.py", {"causal_sdpa"})
    ns["causal_sdpa"](**ins)
    assert _signature(made[0]) == _signature(attention.sdpa_graph(p, ins))


def test_plot_09_declares_the_training_recipes_the_attention_op_uses(declare):
    declare(attention)
    p = attention.SdpaProblem(batch=1, heads=2, seq=8, head_dim=16, causal=True)
    ins = {n: meta(1, 2, 8, 16) for n in ("q", "k", "v", "o", "d_o", "dq", "dk", "dv")}
    ins["stats"] = meta(1, 2, 8, 1, dtype=torch.float32)
    names = {"CAUSAL", "new_graph", "like", "sdpa_training_forward", "sdpa_backward"}
    ns, made = _page("plot_09_sdpa_backward.py", names)
    ns["sdpa_training_forward"](*(ins[n] for n in ("q", "k", "v", "o", "stats")))
    ns["sdpa_backward"](*(ins[n] for n in ("q", "k", "v", "o", "d_o", "stats", "dq", "dk", "dv")))
    assert _signature(made[0]) == _signature(attention.sdpa_forward_training_graph(p, ins))
    assert _signature(made[1]) == _signature(attention.sdpa_backward_graph(p, ins))


def test_signature_tells_graphs_apart(declare):
    """The comparison is not vacuous: a different mask or a missing epilogue changes the signature."""
    declare(attention)
    declare(matmul)
    ins = {n: meta(1, 2, 8, 16) for n in ("q", "k", "v", "o")}
    causal = attention.sdpa_graph(attention.SdpaProblem(batch=1, heads=2, seq=8, head_dim=16, causal=True), ins)
    full = attention.sdpa_graph(attention.SdpaProblem(batch=1, heads=2, seq=8, head_dim=16, causal=False), ins)
    assert _signature(causal) != _signature(full)
    p = matmul.MatmulProblem(batch=2, m=16, k=32, n=16)
    mm = {"a": meta(2, 16, 32), "b": meta(2, 32, 16), "bias": meta(1, 1, 16), "y": meta(2, 16, 16)}
    mm["amax"] = meta(1, 1, 1, dtype=torch.float32)
    with_amax = matmul.matmul_epilogue_graph(p, mm)
    without = matmul.matmul_epilogue_graph(p, mm, amax=False)
    assert _signature(with_amax) != _signature(without)


def test_plot_13_declares_the_paged_decode_recipe(declare):
    declare(paged)
    p = paged.PagedDecodeProblem(batch=2, heads=2, head_dim=16, max_context=64, page_size=16)
    i32 = dict(dtype=torch.int32)
    d = {"q": meta(2, 2, 1, 16), "o": meta(2, 2, 1, 16), "k_pool": meta(8, 2, 16, 16), "v_pool": meta(8, 2, 16, 16)}
    d |= {"page_table": meta(2, 1, 4, 1, **i32)}
    d |= {n: meta(2, 1, 1, 1, **i32) for n in ("seq_len_q", "seq_len_kv")}
    ns, made = _page("plot_13_paged_decode.py", {"paged_decode"})
    ns["paged_decode"](d, p.pages_per_sequence * p.page_size)
    assert _signature(made[0]) == _signature(paged.paged_decode_graph(p, d))


# --- on the GPU (marker gpu; skipped without one) ---


def _sub(data, fused):
    return {k: data[k] for k in fused.io}


@pytest.mark.gpu
def test_attention_training_graphs_match_autograd():
    from cudnn_guide.graphs import attention

    p = attention.SdpaProblem(batch=1, heads=2, seq=256, head_dim=64, causal=True)
    d = attention.make_training_inputs(p, seed=1)
    fwd, bwd = attention.sdpa_forward_training_graph(p, d), attention.sdpa_backward_graph(p, d)
    check.poison(d["o"], d["stats"], d["dq"], d["dk"], d["dv"])
    fwd.execute(fwd.pack(**_sub(d, fwd)))
    bwd.execute(bwd.pack(**_sub(d, bwd)))
    out, grads = check.reference_grads(lambda q, k, v: p.torch_forward(q, k, v), {n: d[n] for n in "qkv"}, d["d_o"])
    check.check(d["o"], out)
    for n in "qkv":
        check.check(d["d" + n], grads[n], name="d" + n)


@pytest.mark.gpu
def test_paged_decode_matches_attention_over_the_gathered_pages():

    p = paged.PagedDecodeProblem(batch=3, heads=4, head_dim=64, max_context=512, page_size=32)
    d = p.make_inputs(seed=2)
    f = paged.paged_decode_graph(p, d)
    check.poison(d["o"])
    f.execute(f.pack(**_sub(d, f)))
    k, v = paged.gather_pages(d["k_pool"], d["page_table"]), paged.gather_pages(d["v_pool"], d["page_table"])
    check.check(d["o"], check.reference(p.torch_forward, d["q"], k, v, p.key_mask(d["seq_len_kv"])))
    d["page_table"].copy_(d["page_table"].flip(2))  # a different page order must change the answer
    f.execute(f.pack(**_sub(d, f)))
    assert not check.compare(d["o"], check.reference(p.torch_forward, d["q"], k, v, p.key_mask(d["seq_len_kv"]))).passed


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_norm_forward_and_backward_match_autograd(kind):
    from cudnn_guide.graphs import norms

    p = norms.NormProblem(tokens=256, hidden=512, kind=kind)
    d = p.make_inputs(seed=3)
    fwd, bwd = norms.norm_forward_graph(p, d), norms.norm_backward_graph(p, d)
    fwd.execute(norms.pack_norm(fwd, d, eps=p.eps))
    bwd.execute(norms.pack_norm(bwd, d))
    params = {"x": d["x"], "scale": d["scale"]} | ({"bias": d["bias"]} if kind == "layer" else {})
    out, grads = check.reference_grads(lambda **kw: p.torch_forward(**kw), params, d["dy"])
    check.check(d["y"], out)
    for n in params:
        check.check(d["d" + n], grads[n], name="d" + n)


@pytest.mark.gpu
def test_conv_gradients_match_autograd():
    from cudnn_guide.graphs import conv_training

    p = conv.ConvProblem(n=2, c=32, h=16, w=16, k=64)
    d = conv_training.make_training_inputs(p, seed=4)
    dg, wg = conv_training.conv_dgrad_graph(p, d), conv_training.conv_wgrad_graph(p, d)
    dg.execute(dg.pack(**_sub(d, dg)))
    wg.execute(wg.pack(**_sub(d, wg)))
    _, grads = check.reference_grads(
        lambda x, w: torch.nn.functional.conv2d(x, w, padding=p.padding), {"x": d["x"], "w": d["w"]}, d["dy"]
    )
    check.check(d["dx"], grads["x"], name="dx")
    check.check(d["dw"], grads["w"], name="dw")


@pytest.mark.gpu
def test_fp8_matmul_is_within_fp8_tolerance():
    from cudnn_guide.graphs import fp8

    p = fp8.Fp8MatmulProblem(m=256, n=256, k=512)
    d = p.make_inputs(seed=5)
    f = fp8.fp8_matmul_graph(p, d)
    f.execute(f.pack(**_sub(d, f)))
    ref = check.reference(torch.matmul, d["a"], d["b"])
    assert check.check(d["c"], ref, tol=0.1).rel_error > check.tolerance(torch.bfloat16) / 16  # really FP8, not bf16


@pytest.mark.gpu
def test_batchnorm_training_matches_pytorch_and_updates_running_stats():

    p = batchnorm.BatchNormProblem(n=4, c=32, h=8, w=8)
    d = p.make_inputs(seed=6)
    rm, rv = d["running_mean"].clone(), d["running_var"].clone()
    f = batchnorm.batchnorm_relu_graph(p, d, training=True)
    f.execute(
        f.pack(
            x=d["x"],
            scale=d["scale"],
            bias=d["bias"],
            running_mean=d["running_mean"],
            running_var=d["running_var"],
            epsilon=tensors.scalar_value(p.eps, rank=4),
            momentum=tensors.scalar_value(p.momentum, rank=4),
            mean=d["mean"],
            inv_var=d["inv_var"],
            next_running_mean=d["running_mean"],
            next_running_var=d["running_var"],
            y=d["y"],
        )
    )
    ref = check.reference(
        lambda x, s, b: p.torch_forward(x, s, b, rm, rv, training=True), d["x"], d["scale"], d["bias"]
    )
    check.check(d["y"], ref, name="y")
    check.check(d["running_mean"], rm, name="running mean", tol=1e-4)
    check.check(d["running_var"], rv, name="running var", tol=1e-4)


@pytest.mark.gpu
def test_fp8_attention_output_and_amax_match_the_reference():
    from cudnn_guide.graphs import fp8

    p = attention.SdpaProblem(batch=1, heads=2, seq=512, head_dim=128, causal=True)
    d = p.make_inputs(seed=7)
    f8 = fp8.make_sdpa_fp8_inputs(d["q"], d["k"], d["v"])
    f = fp8.sdpa_fp8_graph(p, f8)
    f.execute(f.pack(**_sub(f8, f)))
    ref = check.reference(p.torch_forward, d["q"], d["k"], d["v"])
    check.check(fp8.dequantize(f8["o8"], f8["descale_o"]), ref, name="O", tol=0.1)
    check.check(f8["amax_o"].reshape(1), ref.abs().max().reshape(1), name="amax_O", tol=0.1)
    assert 0 < f8["amax_s"].item() <= 1.0 + 1e-3  # softmax probabilities


@pytest.mark.parametrize("left", [None, 16])
def test_the_band_graph_is_causal_with_an_optional_window_planned_from_a_then_fallback(left):
    made, built, adopted = [], [], []

    def pygraph(*args, handle=None, **kwargs):  # no GPU here: build only records its modes
        g = cudnn.pygraph(*args, **kwargs)
        g.build = lambda modes, g=g: built.append(list(modes))
        made.append((g, handle, kwargs))
        return g

    class Adopted:
        def __init__(self, g, handle, name=None):
            self.g, self.handle, self.name = g, handle, name
            adopted.append(self)

        def bind(self, pack):
            self.pack = pack
            return "launcher"

    shim = types.SimpleNamespace(**{n: getattr(cudnn, n) for n in dir(cudnn) if not n.startswith("__")})
    shim.pygraph = pygraph
    q, k, v = (torch.empty(2, 4, 64, 32, dtype=torch.bfloat16) for _ in range(3))
    with mock.patch.dict("sys.modules", {"cudnn": shim}), mock.patch.object(attention.graphs, "adopt", Adopted):
        run, o = attention.sdpa_band_launcher(q, k, v, left_bound=left, handle="handle")
    ((g, handle, kwargs),) = made
    assert handle == "handle" and kwargs["io_data_type"] == cudnn.data_type.BFLOAT16
    assert kwargs["intermediate_data_type"] == kwargs["compute_data_type"] == cudnn.data_type.FLOAT
    (node,) = g.nodes
    params = node.params
    assert params["diagonal_alignment"] == cudnn.diagonal_alignment.TOP_LEFT
    assert params["diagonal_band_right_bound"] == 0
    assert params.get("diagonal_band_left_bound") == left and params["generate_stats"] is False
    assert params["attn_scale"] == pytest.approx(32**-0.5) and set(node.inputs) >= {"q", "k", "v"}
    assert built == [[cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]]
    assert run == "launcher" and o.shape == q.shape and o.dtype == q.dtype
    (a,) = adopted
    assert a.g is g and a.handle == "handle" and a.name == "sdpa"
    assert len(a.pack) == 4 and all(x is y for x, y in zip(a.pack.values(), (q, k, v, o)))  # bound to these
