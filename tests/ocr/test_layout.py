"""Reading order for line-level OCR output: columns, tables, paragraphs; word boxes from line boxes."""

import numpy as np

from tools.ocr.layout import core_box, reading_order, rows_of, split_line


def _lines(order):
    return [[i for i in row] for block in order for row in block]


def test_two_text_columns_with_a_shared_baseline_grid_read_column_by_column():
    # a title, then two columns of long lines whose baselines line up exactly (typeset text)
    boxes = [(50, 10, 550, 30)]
    boxes += [(50, 50 + 25 * i, 290, 70 + 25 * i) for i in range(6)]  # left column, 1..6
    boxes += [(310, 50 + 25 * i, 550, 70 + 25 * i) for i in range(6)]  # right column, 7..12
    boxes += [(50, 220, 550, 240)]  # a footer across both columns
    order = [i for row in _lines(reading_order(np.array(boxes))) for i in row]
    assert order == [0, *range(1, 7), *range(7, 13), 13]


def test_table_rows_are_read_left_to_right_not_column_by_column():
    # label column and two short number columns, row-aligned: a table, read row by row
    boxes = []
    for r in range(4):
        y = 100 + 22 * r
        boxes += [(50, y, 200, y + 16), (300, y, 350, y + 16), (400, y, 450, y + 16)]
    rows = _lines(reading_order(np.array(boxes)))
    assert rows == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]


def test_column_gaps_that_line_up_by_chance_do_not_interleave_columns():
    # two columns with a paragraph gap at the same height in both: bands split there, but the
    # bands share the gutter, so they are read as one two-column block
    left = [(50, 50 + 25 * i, 290, 70 + 25 * i) for i in (0, 1, 2, 4, 5, 6)]
    right = [(310, 50 + 25 * i, 550, 70 + 25 * i) for i in (0, 1, 2, 4, 5, 6)]
    order = [i for row in _lines(reading_order(np.array(left + right))) for i in row]
    assert order == list(range(12))


def test_rows_group_overlapping_boxes_and_sort_left_to_right():
    boxes = np.array([(200, 10, 260, 30), (10, 12, 100, 28), (10, 40, 90, 60)], np.float32)
    assert [r.tolist() for r in rows_of(boxes, np.arange(3))] == [[1, 0], [2]]


def test_split_line_spreads_the_box_over_words_by_characters():
    words = split_line("ab cdef", (0, 0, 70, 10))
    assert [w for w, _ in words] == ["ab", "cdef"]
    assert np.allclose(words[0][1], [0, 0, 20, 10]) and np.allclose(words[1][1], [30, 0, 70, 10])


def test_core_box_of_a_skewed_line_is_as_tall_as_its_text():
    quad = np.array([(0, 0), (400, 20), (400, 40), (0, 20)], np.float32)  # 20 px tall, rising 20 px
    box = core_box(quad)
    assert np.isclose(box[3] - box[1], 20) and box[0] == 0 and box[2] == 400
