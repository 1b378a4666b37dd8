"""troubleshooting: the troubleshooting page's accidental matmuls, the cases that execute a graph, and its
conclusions.

Everything here runs without a GPU: the operands are allocated on the CPU, the executions are stand-ins
that raise or write an output, and the GPU's synchronize is a no-op where a case must not fail.
"""

from __future__ import annotations

import pytest
import torch

from cudnn_guide import InputError
from cudnn_guide.studies import troubleshooting
from cudnn_guide.studies.failures import Cases
from cudnn_guide.studies.troubleshooting import EMPTY_WORKSPACE, WRONG_STRIDES


class cudnnGraphNotSupportedError(Exception):  # the frontend's name, which the rows keep
    pass


@pytest.fixture
def no_gpu_sync(monkeypatch):
    """``torch.cuda.synchronize`` as a no-op: a call that returns is not a failure on a CPU-only torch."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)


def test_the_accidental_matmuls_are_laid_out_and_typed_as_the_page_declares_them():
    cudnn = pytest.importorskip("cudnn")
    dt = cudnn.data_type
    matmuls = troubleshooting.accidental_matmuls(device="cpu")
    assert list(matmuls) == [
        "matmul, A with no contiguous inner dim",
        "matmul in float64",
        "matmul int8 × int8 → int32",
    ]
    (fix0, (a0, b0, c0)), (fix1, (a1, b1, c1, k1)), (fix2, (a2, b2, c2, k2)) = matmuls.values()
    assert fix0 == "make A contiguous in its last or second-last dim"
    assert a0.shape == (4, 256, 512) and a0.stride() == (262144, 1024, 2) and a0.dtype == torch.bfloat16
    assert b0.shape == (4, 512, 256) and b0.is_contiguous() and c0 == dt.BFLOAT16
    assert fix1 == "compute in fp32 or below (or use torch.matmul for float64)"
    assert {a1.dtype, b1.dtype} == {torch.float64} and a1.shape == b1.shape == (4, 256, 256)
    assert (c1, k1) == (dt.DOUBLE, dt.DOUBLE)
    assert fix2 == "use the layouts and types cuDNN's int8 engines take, or fp8/bf16"
    assert {a2.dtype, b2.dtype} == {torch.int8} and (c2, k2) == (dt.INT32, dt.INT32)
    assert a1 is not b1 and a2 is not b2  # separate operands


def test_an_empty_workspace_that_raises_is_kept_as_failing_at_execute(capsys):
    cases = Cases()

    def no_room():
        raise cudnnGraphNotSupportedError("workspace too small:\nneeds 1024 bytes")

    troubleshooting.try_empty_workspace(cases, no_room, needed=1024)
    assert cases.rows == [
        {
            "case": EMPTY_WORKSPACE,
            "outcome": "fails with a message",
            "surfaces at": "execute",
            "error": "cudnnGraphNotSupportedError",
            "message": "workspace too small: needs 1024 bytes",
            "fix": "allocate g.get_workspace_size() bytes (1024 here)",
        }
    ]
    assert capsys.readouterr().out.startswith("cudnnGraphNotSupportedError: workspace too small")


@pytest.mark.parametrize("needed, kind", [(0, "runs"), (512, "raises nothing")])
def test_an_empty_workspace_that_raises_nothing_is_said_and_kept(needed, kind, capsys, no_gpu_sync):
    cases = Cases()
    troubleshooting.try_empty_workspace(cases, lambda: None, needed=needed)
    assert cases.rows == [
        {
            "case": EMPTY_WORKSPACE,
            "outcome": kind,
            "surfaces at": "nowhere",
            "error": "none",
            "message": f"the plan needs {needed} bytes",
            "fix": "—",
        }
    ]
    assert capsys.readouterr().out == f"no error with an empty workspace (the plan needs {needed} bytes)\n"


def test_wrong_strides_that_raise_are_kept_at_execute_and_the_output_is_not_judged(capsys):
    cases = Cases()

    def wrong():
        raise ValueError("K: stride mismatch")

    reference = torch.ones(4, 8)
    troubleshooting.try_wrong_strides(cases, wrong, torch.full((4, 8), float("nan")), reference)
    row = cases.rows[0]
    assert (row["case"], row["outcome"], row["surfaces at"], row["error"]) == (
        WRONG_STRIDES,
        "fails with a message",
        "execute",
        "ValueError",
    )
    assert row["fix"] == "bind tensors with the declared strides" and len(cases.rows) == 1
    assert capsys.readouterr().out == "execute raised ValueError: K: stride mismatch\n"


@pytest.mark.parametrize("right", [True, False])
def test_wrong_strides_that_raise_nothing_are_judged_by_the_output_they_wrote(right, capsys, no_gpu_sync):
    cases = Cases()
    reference = torch.randn(2, 3, 4, 8)
    out = torch.full_like(reference, float("nan"))  # poisoned, as the page does first
    view = out[..., :5]  # read after the call: the page passes o[..., :d]

    def wrong():
        out.copy_(reference if right else reference.flip(-1))

    troubleshooting.try_wrong_strides(cases, wrong, view, reference[..., :5])
    row = cases.rows[0]
    assert row["outcome"] == "raises nothing, " + ("right output" if right else "wrong output")
    assert (row["surfaces at"], row["error"]) == ("nowhere: execute raised nothing", "none")
    assert row["message"].startswith("the output: check K bound with the wrong strides:")
    assert row["fix"] == "bind tensors with the declared strides; check packs (BuiltGraph.check_pack)"
    lines = capsys.readouterr().out.splitlines()
    verdict = "PASS rel. error 0.00e+00" if right else "FAIL rel. error "
    assert lines[:2] == ["execute raised nothing; the output:", "check K bound with the wrong strides:"]
    assert lines[2].startswith("    " + verdict) and len(lines) == 3  # the check's lines as it wraps them
    assert all(len(line) <= 88 and "  " not in line.strip() for line in lines)  # no run of spaces inside a line


def test_try_guarded_says_what_builtgraph_raised_or_that_it_raised_nothing(capsys):
    class Built:
        def __init__(self, error=None):
            self.error, self.packs = error, []

        def execute(self, pack):
            self.packs.append(pack)
            if self.error:
                raise self.error

    refuses = Built(InputError("sdpa: 'k' is bound with strides (1, 2) but declared (2, 1)"))
    assert troubleshooting.try_guarded(refuses, {"k": 1}) == (
        "InputError: sdpa: 'k' is bound with strides (1, 2) but declared (2, 1)"
    )
    assert refuses.packs == [{"k": 1}]
    assert troubleshooting.try_guarded(Built(), {}) == "BuiltGraph.execute raised nothing"
    assert capsys.readouterr().out.splitlines()[-1] == "BuiltGraph.execute raised nothing"
    with pytest.raises(KeyError):  # only InputError is the guard speaking
        troubleshooting.try_guarded(Built(KeyError("bug")), {})


def _cases():
    cases = Cases()
    cases.add("head dim 100", "fails with a message", "validate", "cudnnGraphNotSupportedError", "x", "pad")
    cases.add("head dim 100, zero-padded to 104", "builds", "—", "none", "3 plan(s)", "—")
    cases.add("matmul in float64", "fails to compile a kernel", "build_plans", "E", "COMPILATION_FAILED", "fp32")
    cases.compiled["matmul in float64"] = (2, 2)
    cases.add("matmul int8 × int8 → int32", "builds", "—", "none", "1 plan(s)", "—")
    cases.add("heuristics: FALLBACK only", "fails with a message", "create_execution_plans", "E", "No valid", "A")
    return cases


def test_the_conclusions_count_the_cases_and_name_where_they_surfaced():
    cases = _cases()
    matmuls = ["matmul in float64", "matmul int8 × int8 → int32"]
    sentences = troubleshooting.conclusions(
        cases, matmuls=matmuls, no_configs=["heuristics: FALLBACK only"], guarded="InputError: k"
    )
    # a kernel that failed to compile is counted apart, as the table and the plot show it
    assert sentences[0] == (
        "Of the 5 cases tried, 2 failed with a message, 1 failed to compile a kernel, 2 built or ran, "
        "and 0 raised nothing at all."
    )
    assert sentences[1].startswith(
        "Where the failures surfaced: validate: 1; build_plans: 1; create_execution_plans: 1. The step says"
    )
    assert sentences[2] == cases.compiled_sentence() and "matmul in float64: 2 of the 2" in sentences[2]
    assert sentences[3] == "Every case that went wrong here raised an error."
    assert sentences[4] == (
        "Of the 2 matmuls written by accident, matmul in float64: fails to compile a kernel at build_plans; "
        "matmul int8 × int8 → int32: builds."
    )
    assert sentences[5] == (
        '"No valid engine configs" (the heuristics proposed nothing) came from: heuristics: FALLBACK only.'
    )
    assert sentences[6] == "The guide's BuiltGraph, handed the same wrongly strided K: InputError: k."
    assert len(sentences) == 7


def test_the_conclusions_name_what_raised_nothing_and_say_when_no_graph_met_no_valid_configs():
    cases = _cases()
    cases.add(WRONG_STRIDES, "raises nothing, wrong output", "nowhere: execute raised nothing", "none", "o", "f")
    cases.add(EMPTY_WORKSPACE, "raises nothing", "nowhere", "none", "the plan needs 8 bytes", "—")
    sentences = troubleshooting.conclusions(
        cases, matmuls={}, no_configs=[], guarded="BuiltGraph.execute raised nothing"
    )
    assert sentences[0].endswith("and 2 raised nothing at all.")
    assert sentences[3] == (
        f"Raised nothing although something was wrong: {WRONG_STRIDES}, {EMPTY_WORKSPACE}. "
        "Only a check of the output or of the variant pack catches these."
    )
    assert sentences[5].endswith("came from: none of the graphs tried here.")


@pytest.mark.gpu
def test_the_accidental_matmuls_declare_on_the_gpu():
    import cudnn

    from cudnn_guide.studies import failures

    handle = cudnn.create_handle()
    for _case, (_fix, operands) in troubleshooting.accidental_matmuls().items():
        failures.matmul_graph(handle, *operands)
