"""The hosting configurations build the site the way the README does, on the same Python."""

from __future__ import annotations

import re

import yaml

DOCS = "python -m nox -s docs"


def _readme_docs_command(root):
    block = re.search(r"Build the site.*?```bash\n(.*?)```", (root / "README.md").read_text(), re.S).group(1)
    return block.strip().replace("python3", "python")


def test_read_the_docs_and_github_pages_run_the_readme_docs_command_in_render_mode(root):
    readme = _readme_docs_command(root)
    assert readme == f"python -m pip install nox && {DOCS}"
    rtd = yaml.safe_load((root / ".readthedocs.yaml").read_text())
    gha = yaml.safe_load((root / ".github" / "workflows" / "docs.yml").read_text())
    rtd_cmds = rtd["build"]["commands"]
    gha_cmds = [s["run"] for s in gha["jobs"]["build"]["steps"] if "run" in s]
    for cmds in (rtd_cmds, gha_cmds):
        assert cmds[0] == "python -m pip install nox"
        build = cmds[1]
        assert build.endswith(DOCS), build
        assert "CUDNN_GUIDE_DOCS_MODE=render" in build  # never executes the examples
        assert "CUDNN_GUIDE_TORCH_INDEX=https://download.pytorch.org/whl/cpu" in build  # a CPU torch
    assert rtd_cmds[1] == gha_cmds[1]  # the very same build command


def test_both_hosts_use_the_same_python_and_one_the_project_supports(root):
    rtd = yaml.safe_load((root / ".readthedocs.yaml").read_text())
    gha = yaml.safe_load((root / ".github" / "workflows" / "docs.yml").read_text())
    setup = next(s for s in gha["jobs"]["build"]["steps"] if s.get("uses", "").startswith("actions/setup-python"))
    assert rtd["build"]["tools"]["python"] == setup["with"]["python-version"]
    minimum = re.search(r'requires-python = ">=(\d+)\.(\d+)"', (root / "pyproject.toml").read_text()).groups()
    assert tuple(map(int, rtd["build"]["tools"]["python"].split("."))) >= tuple(map(int, minimum))


def test_pages_deploys_what_the_build_wrote(root):
    gha = yaml.safe_load((root / ".github" / "workflows" / "docs.yml").read_text())
    upload = next(s for s in gha["jobs"]["build"]["steps"] if "upload-pages-artifact" in s.get("uses", ""))
    assert upload["with"]["path"] == "docs/_build/html"
    assert gha["jobs"]["deploy"]["needs"] == "build"


def test_the_noxfile_installs_torch_from_the_index_the_hosts_name(root):
    nox = (root / "noxfile.py").read_text()
    assert 'os.environ.get("CUDNN_GUIDE_TORCH_INDEX"' in nox and '"--index-url", TORCH_INDEX' in nox


def test_neither_host_publishes_sphinx_doctrees(root):
    """The pickled doctrees (7 MB of build state) are removed before the site is uploaded or copied."""
    rtd = yaml.safe_load((root / ".readthedocs.yaml").read_text())["build"]["commands"]
    gha = yaml.safe_load((root / ".github" / "workflows" / "docs.yml").read_text())["jobs"]["build"]["steps"]
    publish = next(i for i, c in enumerate(rtd) if "READTHEDOCS_OUTPUT" in c)
    assert any("rm -rf docs/_build/html/.doctrees" in c for c in rtd[: publish + 1])
    upload = next(i for i, s in enumerate(gha) if "upload-pages-artifact" in s.get("uses", ""))
    assert any("rm -rf docs/_build/html/.doctrees" in s.get("run", "") for s in gha[:upload])
