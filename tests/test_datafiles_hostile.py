"""`datafiles.read_json` and `read_jsonl` turn every JSON that does not parse into a CorruptDataError
naming the file: not only syntax errors (``json.JSONDecodeError``, with a line and column) but an
integer too long to convert (a plain ``ValueError``, no ``msg``) and nesting too deep to parse
(``RecursionError``), which used to escape as AttributeError and RecursionError."""

from __future__ import annotations

import pytest

from cudnn_guide import datafiles
from cudnn_guide.errors import CorruptDataError

HUGE_INT = "1" * 5000  # over Python's 4300-digit limit for int(str)
DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000

HOSTILE = {
    "huge_int": (f'{{"median_ms": {HUGE_INT}}}', r"not valid JSON \(Exceeds the limit \(4300 digits\)"),
    "deep_array": (DEEP_ARRAY, r"not valid JSON \(nested too deeply to parse"),
    "deep_object": (DEEP_OBJECT, r"not valid JSON \(nested too deeply to parse"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_read_json_refuses_unparseable_json_naming_the_file(tmp_path, kind):
    text, problem = HOSTILE[kind]
    path = tmp_path / f"{kind}.json"
    path.write_text(text)
    with pytest.raises(CorruptDataError, match=problem) as info:
        datafiles.read_json(path)
    assert info.value.path == str(path), f"the error names {info.value.path!r}, not the file read ({path})"
    assert str(info.value).startswith(f"{path}: "), f"the message does not start with the file: {info.value}"
    assert "Fix:" in str(info.value), f"the message names no fix: {info.value}"


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_read_jsonl_refuses_an_unparseable_line_naming_the_file_and_line(tmp_path, kind):
    text, problem = HOSTILE[kind]
    path = tmp_path / f"{kind}.jsonl"
    path.write_text('{"example": "plot_02"}\n\n' + text + "\n")
    with pytest.raises(CorruptDataError, match="line is " + problem) as info:
        datafiles.read_jsonl(path)
    assert (info.value.path, info.value.line) == (str(path), 3), f"names {info.value.path}:{info.value.line}"
    assert str(info.value).startswith(f"{path}:3: "), f"the message does not start with file:line: {info.value}"


def test_a_syntax_error_still_names_its_line_and_column(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{\n  "a": \n}')
    with pytest.raises(CorruptDataError, match=r"not valid JSON \(Expecting value, column 1\)") as info:
        datafiles.read_json(path)
    assert info.value.line == 3, f"the syntax error is on line 3, the message says {info.value.line}"
