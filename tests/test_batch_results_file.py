"""A run's results file: a torn last line is cut, a damaged or foreign line is named."""

from __future__ import annotations

import json

import pytest


def test_results_file_a_torn_last_line_is_cut_a_damaged_middle_line_is_named(tmp_path):
    from self_improving_rag.batch import read_done
    from self_improving_rag.errors import BatchError

    path = tmp_path / "results.jsonl"
    rows = [json.dumps({"id": i, "question": "?", "answer": None, "refused": True, "attempts": []}) + "\n"
            for i in ("a", "b", "c")]
    path.write_text("".join(rows) + '{"id": "d", "answ')
    assert list(read_done(path)) == ["a", "b", "c"]
    assert path.read_text() == "".join(rows)
    damaged = rows[0] + "X" + rows[1] + rows[2]
    path.write_text(damaged)
    with pytest.raises(BatchError, match="line 2 is damaged"):
        read_done(path)
    assert path.read_text() == damaged, "nothing is cut when rows follow the damage"


def test_a_whole_line_that_is_not_a_result_row_is_named_and_kept(tmp_path):
    # Valid JSON with an id but not the fields a summary reads (an edited or foreign line): a
    # resume used to end in an internal KeyError. It is named, and nothing is cut, also at the end.
    from self_improving_rag.batch import read_done
    from self_improving_rag.errors import BatchError

    path = tmp_path / "results.jsonl"
    text = json.dumps({"id": "a", "question": "?", "answer": "x", "refused": False, "attempts": []}) + "\n" + \
        json.dumps({"id": "b", "answer": "y"}) + "\n"
    path.write_text(text)
    with pytest.raises(BatchError, match="line 2 \\(id 'b'\\) is not a whole result row \\(no 'question', 'refused', "
                                         "'attempts'\\); delete or repair that line"):
        read_done(path)
    assert path.read_text() == text
