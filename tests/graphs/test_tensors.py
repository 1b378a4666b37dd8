import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cudnn_guide.errors import InputError
from cudnn_guide.graphs import tensors


def test_dtype_map():
    import cudnn

    assert tensors.cudnn_dtype(torch.bfloat16) == cudnn.data_type.BFLOAT16
    assert tensors.cudnn_dtype(torch.float16) == cudnn.data_type.HALF
    assert tensors.cudnn_dtype(torch.float32) == cudnn.data_type.FLOAT
    with pytest.raises(InputError, match="complex64 has no cuDNN equivalent"):
        tensors.cudnn_dtype(torch.complex64)


def test_describe_nhwc():
    x = torch.empty(2, 8, 5, 7).to(memory_format=torch.channels_last)
    spec = tensors.describe(x, allow_cpu=True)
    assert spec.dims == (2, 8, 5, 7)
    assert spec.strides == (8 * 5 * 7, 1, 7 * 8, 8)
    assert spec.layout == "NHWC"
    assert tensors.is_nhwc(x)
    assert tensors.describe(torch.empty(2, 8, 5, 7), allow_cpu=True).layout == "packed"
    assert not tensors.is_nhwc(torch.empty(2, 8, 5, 7))


def test_nhwc_keeps_logical_dims_and_values():
    x = torch.randn(2, 3, 4, 5)
    y = tensors.nhwc(x)
    assert y.shape == x.shape and torch.equal(x, y) and tensors.is_nhwc(y)
    with pytest.raises(InputError, match="4-D or 5-D"):
        tensors.nhwc(torch.randn(3, 4))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: torch.empty(2, 3), "CUDA tensors"),
        (lambda: [1, 2, 3], "expected a torch.Tensor"),
        (lambda: torch.tensor(1.0), "0-d tensor"),
        (lambda: torch.empty(0, 3), "zero-size dimension"),
        (lambda: torch.empty(3, 1).expand(3, 4), "overlap"),
        (lambda: torch.empty(3, dtype=torch.complex64), "no cuDNN equivalent"),
    ],
)
def test_describe_rejects_bad_input(make, match):
    t = make()
    allow_cpu = match != "CUDA tensors"
    with pytest.raises(InputError, match=match):
        tensors.describe(t, name="x", allow_cpu=allow_cpu)


def test_input_error_is_a_value_error():
    with pytest.raises(ValueError):
        tensors.describe(torch.empty(0), allow_cpu=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=5), st.randoms(use_true_random=False))
def test_permuted_dense_tensors_never_overlap(shape, rnd):
    perm = list(range(len(shape)))
    rnd.shuffle(perm)
    t = torch.empty(shape).permute(perm)
    assert tensors._non_overlapping(tuple(t.shape), tuple(t.stride()))
    tensors.describe(t, allow_cpu=True)  # no error


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(2, 5), min_size=2, max_size=4), st.data())
def test_broadcast_views_always_overlap(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    base = list(shape)
    base[axis] = 1
    t = torch.empty(base).expand(shape)
    assert not tensors._non_overlapping(tuple(t.shape), tuple(t.stride()))
    with pytest.raises(InputError):
        tensors.describe(t, allow_cpu=True)


def test_scalar_value_is_host_float32():
    v = tensors.scalar_value(0.5)
    assert v.device.type == "cpu" and v.dtype == torch.float32 and v.shape == (1, 1, 1) and v.item() == 0.5
