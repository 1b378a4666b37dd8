"""GPU tests of :mod:`cudnn_guide.graphs.builder` and :mod:`cudnn_guide.graphs.plan_cache` (marker ``gpu``)."""

import pytest
from conftest import SMALL_CONV

from cudnn_guide import check, graphs
from cudnn_guide.errors import GraphBuildError, InputError
from cudnn_guide.graphs import builder, conv, matmul, plan_cache, tensors

# --- on the GPU (marker gpu; skipped without one) ---


@pytest.mark.gpu
def test_build_records_five_steps_and_output_is_correct(small_conv):
    inputs, fused = small_conv
    assert list(fused.report.step_seconds) == list(builder.STEPS)
    check.poison(inputs["y"])
    fused.execute(fused.pack(**inputs))
    ref = check.reference(SMALL_CONV.torch_forward, inputs["x"], inputs["w"], inputs["b"])
    assert check.check(inputs["y"], ref).passed


@pytest.mark.gpu
def test_bad_variant_packs_are_input_errors(small_conv):
    inputs, fused = small_conv
    bad = dict(inputs, x=inputs["x"].contiguous())  # NCHW strides where NHWC was declared
    with pytest.raises(InputError, match="declared with dims"):
        fused.execute(fused.pack(**bad))
    with pytest.raises(InputError, match="must be on the GPU"):
        fused.execute(fused.pack(**dict(inputs, w=inputs["w"].cpu())))
    with pytest.raises(InputError, match="no tensor for"):
        fused.execute({fused.io["x"]: inputs["x"]})


@pytest.mark.gpu
def test_an_unsupported_graph_is_distinguishable_and_names_the_step():
    # An int32 convolution: cuDNN has no engine for it on Hopper (seen on the H200 builder).
    import cudnn

    from cudnn_guide.errors import GraphNotSupportedError

    handle = graphs.handle_for_current_device()
    g = cudnn.pygraph(io_data_type=cudnn.data_type.INT32, compute_data_type=cudnn.data_type.INT32, handle=handle)
    x = g.tensor(name="x", dim=[1, 8, 8, 8], stride=[512, 1, 64, 8], data_type=cudnn.data_type.INT32)
    w = g.tensor(name="w", dim=[8, 8, 3, 3], stride=[72, 1, 24, 8], data_type=cudnn.data_type.INT32)
    y = g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], compute_data_type=cudnn.data_type.INT32)
    y.set_output(True).set_data_type(cudnn.data_type.INT32)
    with pytest.raises(GraphNotSupportedError) as info:
        graphs.build(g, name="int32 conv")
    assert info.value.step in builder.STEPS
    assert "int32 conv" in str(info.value) and "not supported" in str(info.value)


@pytest.mark.gpu
def test_a_malformed_graph_is_a_build_error_not_unsupported():
    import cudnn

    handle = graphs.handle_for_current_device()
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    a = g.tensor(name="a", dim=[1, 64, 32], stride=[2048, 32, 1])
    b = g.tensor(name="b", dim=[1, 48, 64], stride=[3072, 64, 1])  # inner dimensions disagree: 32 vs 48
    c = g.matmul(a, b)
    c.set_output(True)
    with pytest.raises(GraphBuildError) as info:
        graphs.build(g, name="mismatched matmul")
    assert info.value.step in builder.STEPS


@pytest.mark.gpu
def test_plan_cache_round_trip_and_rejects_corruption(tmp_path, small_conv):
    inputs, _ = small_conv
    cache = plan_cache.PlanCache(tmp_path)
    key = plan_cache.current_key("small conv")
    build = lambda: conv.conv_bias_relu_graph(SMALL_CONV, inputs)
    _, source = cache.get_or_build(key, build)
    assert source == "built"
    plan, source = cache.get_or_build(key, build)
    assert source == "cache" and cache.last_event == "hit"
    check.poison(inputs["y"])
    plan.execute(**inputs)
    ref = check.reference(SMALL_CONV.torch_forward, inputs["x"], inputs["w"], inputs["b"])
    assert check.check(inputs["y"], ref).passed
    raw = bytearray(cache.path(key).read_bytes())
    raw[-10] ^= 0xFF
    cache.path(key).write_bytes(bytes(raw))
    _, source = cache.get_or_build(key, build)
    assert source == "built"
    assert cache.read(key) is not None


@pytest.mark.gpu
def test_pass_by_value_scalar_changes_the_result():
    problem = matmul.MatmulProblem(batch=2, m=64, k=64, n=64, alpha=2.0)
    inputs = problem.make_inputs()
    fused = matmul.matmul_epilogue_graph(problem, inputs)
    for alpha in (2.0, -1.0):
        p = matmul.MatmulProblem(batch=2, m=64, k=64, n=64, alpha=alpha)
        check.poison(inputs["y"], inputs["amax"])
        fused.execute(fused.pack(**inputs, alpha=tensors.scalar_value(alpha)))
        ref_y, ref_amax = check.reference(p.torch_forward, inputs["a"], inputs["b"], inputs["bias"])
        assert check.check(inputs["y"], ref_y).passed
        assert check.check(inputs["amax"], ref_amax, tol=1e-2).passed


# --- on the CPU ---


class _Tensor:
    def __init__(self, name, uid):
        self.name, self.uid = name, uid

    def get_uid(self):
        return self.uid

    def get_name(self):
        return self.name

    def get_is_virtual(self):
        return False

    def get_stride(self):
        return [1]

    def get_dim(self):
        return [4]


class _Graph:
    """Stands in for a ``cudnn.pygraph``: the five build steps succeed, one plan, 64 bytes of workspace."""

    def __init__(self, inputs, outputs):
        self.inputs, self.outputs, self.steps = inputs, outputs, []
        for step in builder.STEPS:
            setattr(self, step, lambda *a, _s=step: self.steps.append(_s))

    def get_inputs(self):
        return self.inputs

    def get_outputs(self):
        return self.outputs

    def get_execution_plan_count(self):
        return 1

    def get_plan_name_at_index(self, i):
        return "eng0"

    def get_workspace_size(self):
        return 64


def test_one_graph_object_carries_the_graph_its_handle_workspace_and_named_tensors(monkeypatch):
    import torch

    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, device=None, **kw: real_empty(*a, **kw))  # no GPU here
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    X, Y = _Tensor("x", 1), _Tensor("y", 2)
    g = _Graph([X], [Y])
    built = builder.build(g, name="demo", handle="the handle", io={"x": X, "y": Y})
    assert isinstance(built, builder.BuiltGraph) and g.steps == list(builder.STEPS)
    assert (built.graph, built.handle, built.workspace.numel()) == (g, "the handle", 64)
    assert built.io == {"x": X, "y": Y} and built.uids == {"x": 1, "y": 2}
    assert built.pack(x="x data", y="y data") == {X: "x data", Y: "y data"}
    with pytest.raises(KeyError, match=r"'demo'.*\['y'\]"):
        built.pack(x="x data")
    assert not hasattr(built, "built")  # one object: no wrapper around it, no alias back to it
    adopted = builder.adopt(g, "the handle", name="by hand", io={"x": X})
    assert adopted.io == {"x": X} and adopted.report.plan_name == "eng0"


def test_the_recipes_return_the_graph_object_itself_not_a_wrapper():
    import ast
    import inspect

    from cudnn_guide.graphs import attention, batchnorm, conv_training, fp8, norms, paged

    for module in (attention, batchnorm, conv, conv_training, fp8, matmul, norms, paged):
        tree = ast.parse(inspect.getsource(module))
        wrappers = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "Fused"]
        assert not wrappers, f"{module.__name__} still wraps a built graph in Fused at lines {wrappers}"
        for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.endswith("_graph")):
            assert ast.unparse(fn.returns) == "graphs.BuiltGraph", (
                f"{module.__name__}.{fn.name} returns {ast.unparse(fn.returns)}; a recipe returns graphs.BuiltGraph"
            )


def test_a_build_report_without_step_times_never_claims_zero_ms():
    from cudnn_guide.graphs.builder import BuildReport

    untimed = str(BuildReport("sdpa", {}, 2, "eng0", 0))
    assert "not timed" in untimed and "0.0 ms" not in untimed
    timed = str(BuildReport("sdpa", {"validate": 0.001, "build_plans": 0.25}, 2, "eng0", 0))
    assert "built in 251.0 ms" in timed


def test_a_build_beside_other_pages_is_untimed_unless_asked_and_takes_no_turn(monkeypatch):
    """Under the docs build's lanes a timed build holds the GPU alone while cuDNN compiles on the CPU.

    So by default it is timed only where that holds nothing up; ``timed=True`` times it as one
    measured block, and an untimed report says why instead of a time.
    """
    import contextlib

    import torch

    from cudnn_guide import collector

    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, device=None, **kw: real_empty(*a, **kw))  # no GPU here
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    taken: list[str] = []

    @contextlib.contextmanager
    def alone():
        taken.append("alone")
        yield

    def build(**kw):
        X, Y = _Tensor("x", 1), _Tensor("y", 2)
        g = _Graph([X], [Y])
        built = builder.build(g, name="demo", handle="the handle", io={"x": X, "y": Y}, **kw)
        assert g.steps == list(builder.STEPS)  # every step ran, timed or not
        return built.report

    plain = build()  # a script: nothing registered, timing costs nothing
    assert list(plain.step_seconds) == list(builder.STEPS) and taken == []
    collector.hold_while_measuring(alone)
    try:
        beside = build()
        assert beside.step_seconds == {} and taken == []
        assert "shares the GPU" in str(beside) and "timed=True" in str(beside) and " ms " not in str(beside)
        asked = build(timed=True)
        assert list(asked.step_seconds) == list(builder.STEPS) and taken == ["alone"]
        with collector.measuring():  # already measured (a first call's build): timed, nothing taken again
            inside = build()
        assert list(inside.step_seconds) == list(builder.STEPS) and taken == ["alone", "alone"]
    finally:
        collector.hold_while_measuring(None)
        collector.give_way_with(None)
    off = build(timed=False)
    assert off.step_seconds == {} and "timed=False" in str(off) and taken == ["alone", "alone"]
    steps: list[bool] = []  # a neighbour waiting to measure may go first before each build, never inside a timed one
    collector.give_way_with(lambda: steps.append(collector.measuring_now()))
    try:
        build()
        build(timed=True)
        with collector.measuring():
            build()
    finally:
        collector.give_way_with(None)
    assert steps == [False, False]  # between_steps at each build's start; not inside a measured block
