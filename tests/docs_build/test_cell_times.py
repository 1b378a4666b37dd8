"""Each cell's seconds, kept beside its page (gallery_build.cell_times)."""

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
