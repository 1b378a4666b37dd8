"""Where a page's time went: cell seconds, and the kinds of work its record counted (gallery_build.cell_times)."""

import json

from gallery_build import cell_times


def test_cell_timer_writes_seconds_per_code_cell(tmp_path, monkeypatch):
    """Record mode times each executed code cell and writes them beside the page, in page order."""
    import time
    import types

    from sphinx_gallery import gen_rst

    def fake_execute(compiler, block, example_globals, script_vars, gallery_conf, file_conf):
        time.sleep(0.02 if block.lineno == 10 else 0.0)
        return "out"

    monkeypatch.setattr(gen_rst, "execute_code_block", fake_execute)
    cell_times.time_cells(tmp_path)
    timed = gen_rst.execute_code_block
    assert timed is not fake_execute
    cell_times.time_cells(tmp_path)  # a second install does not wrap twice
    assert gen_rst.execute_code_block is timed
    script_vars = {"src_file": "/x/examples/plot_99_demo.py", "execute_script": True}
    for lineno, kind, content in (
        (3, "text", "A title"),
        (10, "code", "# a comment\nx = slow()\n"),
        (20, "code", "y = 1"),
    ):
        block = types.SimpleNamespace(type=kind, lineno=lineno, content=content)
        assert gen_rst.execute_code_block(None, block, {}, script_vars, {}, {}) == "out"
    cells = cell_times.read_cell_times(tmp_path)["plot_99_demo.py"]
    assert [c["line"] for c in cells] == [10, 20]  # text blocks are not cells
    assert cells[0]["code"] == "x = slow()" and cells[1]["code"] == "y = 1"
    assert cells[0]["seconds"] >= 0.02 > cells[1]["seconds"]


def test_time_spent_splits_each_recorded_page_by_kind_of_work(tmp_path):
    """The record's counted kinds and sphinx-gallery's total give the rest; pages recorded before
    records counted their time are left out, not shown as zeros."""
    import json

    def write(name, data):
        (tmp_path / name).write_text(json.dumps(data))

    write("plot_01_a.record.json", {"seconds": {"timing": 3.0, "compile": 1.5}})
    write("plot_01_a.cost.json", {"time": 10.0, "memory": 0.0})
    write("plot_02_b.record.json", {"headlines": []})  # an older record: no "seconds"
    write("plot_02_b.cost.json", {"time": 7.0, "memory": 0.0})
    rows = cell_times.time_spent(tmp_path)
    assert rows == [
        {"example": "plot_01_a", "total": 10.0, "timing": 3.0, "fresh processes": 0.0, "compile": 1.5, "rest": 5.5}
    ]


def test_a_record_counts_timing_and_compile_without_overlap(tmp_path, monkeypatch):
    """What the collector counts reaches the record the build writes: a benchmark-like block is
    timing, a nested block is not counted again, and torch.compile's seconds inside it move from
    timing to compile."""
    import time

    from cudnn_guide import collector
    from cudnn_guide.report import records

    clock = iter([0.0, 0.0, 0.04, 0.04])  # begin, entering the block, leaving it, finish
    monkeypatch.setattr(collector, "compile_seconds", lambda: next(clock))
    records.begin()
    with collector.spending("timing"):
        time.sleep(0.1)
        with collector.spending("fresh processes"):
            time.sleep(0.02)
    records.headline("x", 1.0, "x")
    data = json.loads(records.finish("plot_demo", "Demo", tmp_path).read_text())
    assert set(data["seconds"]) == {"timing", "compile"}
    assert data["seconds"]["compile"] == 0.04
    assert 0.12 - 0.04 <= data["seconds"]["timing"] < 0.5
