"""Which of plot_11's ``torch.compile`` baselines are compiled for their shape, and which for symbolic shapes?

Replays the page's compile order on the CPU (small batch, the page's channels and resolutions):
its base problem, training then inference, then one ``compile_quietly``-style wrapper per ResNet
stage (``dynamic=None``, the page's setting), each called for training then inference. A backend
that compiles nothing records, for every graph Dynamo hands it, whether any input size is
symbolic. Dynamo's automatic dynamic shapes recompile a function whose input shape changed for
symbolic sizes, and later shapes reuse that graph. Dynamo's limit on compiled versions is raised
as :func:`cudnn_guide.measure.baselines.compile_quietly` raises it (ten are needed per shape).

    python3 tools/archive/dynamic_compile_probe.py [docs/data/dynamic_compile_probe.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cudnn_guide.graphs import batchnorm  # noqa: E402
from cudnn_guide.measure.baselines import RECOMPILE_LIMIT  # noqa: E402

STAGES = {"64×56×56": (64, 56), "128×28×28": (128, 28), "256×14×14": (256, 14), "512×7×7": (512, 7)}
"""plot_11's stages: channels, and height = width."""


def _symbolic(example_inputs: list) -> bool:
    sizes = [s for t in example_inputs if isinstance(t, torch.Tensor) for s in t.shape]
    return any(isinstance(s, torch.SymInt) for s in sizes + list(example_inputs))


def replay(batch: int = 2, dynamic: bool | None = None) -> list[dict]:
    """Each graph Dynamo compiled, in order: which call asked for it, and whether its sizes are symbolic."""
    import torch._dynamo

    torch._dynamo.reset()
    graphs: list[dict] = []
    caller = {"call": ""}

    def backend(gm, example_inputs):
        graphs.append({"call": caller["call"], "symbolic": _symbolic(example_inputs)})
        return gm.forward

    def run(name: str, p, fn, training: bool) -> None:
        caller["call"] = f"{name}, {'training' if training else 'inference'}"
        x = torch.randn(p.n, p.c, p.h, p.w)
        fn(x, torch.randn(p.c), torch.randn(p.c), torch.zeros(p.c), torch.ones(p.c), training)

    base = batchnorm.BatchNormProblem(n=batch, c=256, h=56, w=56)  # the page's base problem, at a small batch
    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True):
        compiled = torch.compile(base.torch_forward, backend=backend)
        for training in (True, False):
            run("base problem", base, compiled, training)
        for stage, (c, hw) in STAGES.items():
            p = batchnorm.BatchNormProblem(n=batch, c=c, h=hw, w=hw)
            compiled = torch.compile(p.torch_forward, backend=backend, dynamic=dynamic)
            for training in (True, False):
                run(f"stage {stage}", p, compiled, training)
    torch._dynamo.reset()
    return graphs


def main(out: Path | None = None) -> dict:
    result = {
        "about": __doc__.split("\n\n")[0],
        "torch": torch.__version__,
        "page (dynamic=None)": replay(dynamic=None),
        "per-shape (dynamic=False)": replay(dynamic=False),
    }
    if out:
        out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    for setting in ("page (dynamic=None)", "per-shape (dynamic=False)"):
        graphs = "; ".join(f"{g['call']}: {'symbolic' if g['symbolic'] else 'static'}" for g in result[setting])
        print(f"{setting}: {graphs}")
    return result


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
