"""The row reader: line numbers for JSONL and JSON lists, and a cost linear in the file (counted, not timed)."""

import io
import json

import pytest

from vlmgrpo.records import ReadCost, read_json_list, read_records


def _rows(count):
    return [{"id": i, "image": f"img/{i % 97}.jpg", "problem": "Where is the dog?\nAnswer with a box.",
             "solution": [i, i + 1, i + 20, i + 30]} for i in range(count)]


def _scanned_for(text):
    cost = ReadCost()
    records = list(read_json_list(text, cost))
    return records, cost.chars_scanned


@pytest.mark.parametrize("indent", [None, 2])
def test_json_list_cost_grows_linearly(indent):
    small, small_cost = _scanned_for(json.dumps(_rows(500), indent=indent))
    large, large_cost = _scanned_for(json.dumps(_rows(2000), indent=indent))
    assert (len(small), len(large)) == (500, 2000)
    # Scanning from the start for every row would make 4x the rows cost ~16x; linear is ~4x.
    assert large_cost / small_cost < 4.2
    assert large_cost <= len(json.dumps(_rows(2000), indent=indent))


def test_json_list_rows_keep_their_lines():
    text = '[\n  {"id": 1},\n\n  {"id": 2,\n   "x": [1,\n 2]},\n  {"id": 3}\n]\n'
    assert [(line, record["id"]) for line, record, _ in read_json_list(text)] == [(2, 1), (4, 2), (7, 3)]


def test_json_list_error_names_the_row_line():
    text = '[\n {"id": 1},\n {"id": 2,,}\n]'
    records = list(read_json_list(text))
    assert records[0][:2] == (2, {"id": 1})
    assert records[1][0] == 3 and records[1][2].startswith("invalid JSON")


@pytest.mark.parametrize("cut, line", [
    ('[\n {"id": 1},\n {"id": 2}\n', 4),  # the closing ] lost: two whole rows, and then the end
    ('[\n {"id": 1},\n', 3),  # cut after a row and its comma
    ('[\n {"id": 1}', 2),
])
def test_a_json_list_cut_short_after_a_whole_row_is_an_error_at_its_end(cut, line):
    """A copy interrupted mid-transfer: the rows read so far come back, then one error where the file ends."""
    records = list(read_json_list(cut, chunk=8))
    assert [record for _, record, error in records if not error][:1] == [{"id": 1}]
    assert records[-1] == (line, None, "the JSON list ends before its closing ']': the file is cut short")


def test_rows_without_a_comma_between_them_or_text_after_the_list_are_errors():
    assert list(read_json_list('[{"id": 1}\n{"id": 2}]'))[-1] == (2, None, "expected ',' or ']' after the row before")
    assert list(read_json_list('[{"id": 1}]\n[{"id": 2}]'))[-1] == (2, None, "text after the JSON list's closing ']'")
    assert list(read_json_list('[{"id": 1}]\n\n')) == [(1, {"id": 1}, None)]


def test_not_a_list_is_one_error():
    assert list(read_json_list('{"id": 1}')) == [(1, None, "expected a JSON list of rows")]


def test_jsonl_lines_blank_lines_and_errors(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"id": 1}\r\n\r\n{"id": 2\n{"id": 3}\n')
    cost = ReadCost()
    records = list(read_records(str(path), cost))
    assert [(line, record) for line, record, _ in records] == [(1, {"id": 1}), (3, None), (4, {"id": 3})]
    assert records[1][2].startswith("invalid JSON")
    assert cost.chars_scanned == len(path.read_text())


def test_jsonl_cost_grows_linearly(tmp_path):
    costs = []
    for count in (500, 2000):
        path = tmp_path / f"{count}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in _rows(count)))
        cost = ReadCost()
        assert len(list(read_records(str(path), cost))) == count
        costs.append(cost.chars_scanned)
    assert costs[1] / costs[0] < 4.2


def test_json_list_is_held_a_chunk_at_a_time(tmp_path):
    text = json.dumps(_rows(4000), indent=2)
    cost = ReadCost()
    records = list(read_json_list(io.StringIO(text).read, cost, chunk=4096))
    assert len(records) == 4000 and records == list(read_json_list(text))
    assert cost.largest_window < 3 * 4096  # not the whole list (about 600k characters)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_rows_and_numbers_that_span_chunks_decode_whole(chunk):
    text = '[\n 1234567,\n {"id": "a long row that spans many chunks", "x": [1, 2, 3]},\n 89\n]'
    assert [(line, record) for line, record, _ in read_json_list(io.StringIO(text).read, chunk=chunk)] == [
        (2, 1234567), (3, {"id": "a long row that spans many chunks", "x": [1, 2, 3]}), (4, 89)]


def test_a_truncated_list_is_an_error_at_its_last_row():
    records = list(read_json_list(io.StringIO('[\n {"id": 1},\n {"id": 2').read, chunk=4))
    assert records[0][:2] == (2, {"id": 1}) and records[1][0] == 3 and records[1][2].startswith("invalid JSON")
