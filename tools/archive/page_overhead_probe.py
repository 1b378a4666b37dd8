"""What does a recorded page cost besides executing its example? Run on a GPU, from the repository root.

Runs the recording's one-example Sphinx build (gallery_build.recording) for a page whose md5 still
matches, so sphinx-gallery executes nothing: what is left is the page's fixed cost (its
interpreter, conf.py's environment, Sphinx reading and writing). Three plain runs, then one under
cProfile, whose top functions by cumulative time are printed.

``python tools/archive/page_overhead_probe.py [plot_08_cuda_graphs.py]``
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import tempfile

from gallery_build import recording

from cudnn_guide.studies import fresh_process


def profiled_build(docs_dir: str, out_dir: str, example: str) -> str:
    prof = cProfile.Profile()
    prof.enable()
    code = recording._build_one_example(docs_dir, out_dir, example)
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(35)
    return f"exit {code}\n{text.getvalue()}"


if __name__ == "__main__":
    sys.path.insert(0, "tools")
    import page_overhead_probe

    example = sys.argv[1] if len(sys.argv) > 1 else "plot_08_cuda_graphs.py"
    out = tempfile.mkdtemp()
    with fresh_process.InterpreterPool(4, preload=recording.recording_preload()) as pool:
        for _ in range(3):
            done = pool.run(recording._build_one_example, "docs", out, example, timeout=None)
            print(f"page build without execution: {done.seconds:.2f} s (exit {done.value})", flush=True)
        print(pool.run(page_overhead_probe.profiled_build, "docs", out, example).value)
