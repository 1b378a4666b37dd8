from gallery_build.frontend_index import frontend_vocabulary
from teaching_share import shares, teaches, visible_statements

PAGE = '''"""
Title
=====

g.validate() in the docstring does not count.
"""

# %%
# A comment naming g.execute(pack) does not count either.
import cudnn
import torch

g = cudnn.pygraph(
    io_data_type=cudnn.data_type.BFLOAT16,
)
y = torch.add(x, x)
for step in (g.validate, g.build_operation_graph):
    step()
print(y)

# sphinx_gallery_start_ignore
g.build_plans()
# sphinx_gallery_end_ignore
'''


def test_statements_are_what_the_reader_sees_and_frontend_calls_are_found():
    statements = visible_statements(PAGE)
    assert statements[2].startswith("g = cudnn.pygraph(") and statements[2].count("\n") == 2  # one statement
    assert not any("build_plans" in s or "docstring" in s or "comment" in s for s in statements)
    vocabulary = frontend_vocabulary()
    taught = [s.splitlines()[0] for s in statements if teaches(s, vocabulary)]
    assert taught == ["g = cudnn.pygraph(", "for step in (g.validate, g.build_operation_graph):"]


def test_every_page_is_measured_and_some_of_each_graph_page_calls_the_frontend():
    result = shares()
    assert len(result) >= 25
    assert all(0 <= k <= n for n, k in result.values())
    assert result["plot_02_conv_bias_relu"][1] >= 10  # the fused graph is declared, built and run on the page
