from types import SimpleNamespace

from crosscheck import split_calls

FLUSH = {"vectorized_elementwise_kernel<FillFunctor>"}


def _trace(*names):
    return [SimpleNamespace(name=n) for n in names]


def test_timed_calls_are_what_follows_a_spin_and_its_flush():
    fill, sleep = "vectorized_elementwise_kernel<FillFunctor>", "at::cuda::sleep"
    trace = _trace(
        fill,
        "memset",
        "conv",  # warm-up: no spin before it, not a timed call
        sleep,
        fill,
        "Memset (Device)",
        "conv",  # timed call 1 (spin, then flush)
        sleep,
        "Memset (Device)",
        "conv",  # timed call 2 (hot: spin only)
        fill,
        "Memset (Device)",
        "conv",  # a host-time call after the run: no spin
    )
    calls = split_calls(trace, FLUSH)
    assert [[op.name for op in c] for c in calls] == [["Memset (Device)", "conv"], ["Memset (Device)", "conv"]]


def test_the_old_order_flush_then_spin_also_splits():
    fill, sleep = "vectorized_elementwise_kernel<FillFunctor>", "at::cuda::sleep"
    calls = split_calls(_trace(fill, sleep, "a", "b", fill, sleep, "a", "b"), FLUSH)
    assert [[op.name for op in c] for c in calls] == [["a", "b"], ["a", "b"]]


def test_span_and_busy_per_call():
    from crosscheck import is_spin_kernel, span_and_busy

    def op(start, end):
        return SimpleNamespace(time_range=SimpleNamespace(start=start, end=end))

    span, busy = span_and_busy([[op(0, 1), op(3, 10)], [op(20, 25)]])
    assert span == [10, 5] and busy == [8, 5]  # the gap between memset and kernel counts in the span only
    assert is_spin_kernel("at::cuda::(anonymous namespace)::spin_kernel(long)") and not is_spin_kernel("conv")
