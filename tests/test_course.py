"""The course printout: every figure of the reference table, reproduced."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lib import course
from lib import roofline as rl
from lib.course import course_tables
from lib.roofline import HARDWARE, decode_cost, request_split
from lib.shapes import LLAMA3_8B

REFERENCE = Path(__file__).parents[1] / "data" / "reference"
COURSE_FILE = REFERENCE / "course_roofline_llama3_8b_h100.txt"
H100 = HARDWARE["H100 SXM"]

def _course_lines() -> list[str]:
    return [line for line in COURSE_FILE.read_text().splitlines() if not line.startswith("#")]



def _numbers(line: str) -> list[str]:
    return re.findall(r"[-+]?\d+(?:\.\d+)?", line)



def test_course_tables_reproduce_reference_exactly():
    expected = _course_lines()
    got = course_tables().splitlines()
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"line {i}: got {g!r}, reference {e!r}"


def test_row_records_round_to_the_reference_figures():
    """The structured rows (what a notebook tabulates) carry the same numbers as the printout."""
    lines = _course_lines()
    pre_start = lines.index("Prefill of one prompt (roofline lower bound on TTFT)") + 2
    dec_start = [i for i, l in enumerate(lines) if l.startswith("One decode step")][0] + 2
    pre_lines = lines[pre_start:pre_start + len(course.COURSE_PROMPTS)]
    dec_lines = lines[dec_start:dec_start + len(course.COURSE_CONTEXTS)]

    def check(value: float, printed: str) -> None:
        decimals = len(printed.split(".")[1]) if "." in printed else 0
        assert f"{value:.{decimals}f}" == printed

    tables = [(course.prefill_rows(LLAMA3_8B, H100), pre_lines, "prompt_tokens"),
              (course.decode_rows(LLAMA3_8B, H100), dec_lines, "context_tokens")]
    for rows, printed_lines, tokens in tables:
        for row, line in zip(rows, printed_lines, strict=True):
            n, gflop, gb, inten, tc, tm, tps = _numbers(line)
            assert row[tokens] == int(n)
            check(row["flops"] / 1e9, gflop)
            check(row["bytes"] / 1e9, gb)
            check(row["intensity_flop_per_byte"], inten)
            check(row["t_compute_s"] * 1e3, tc)
            check(row["t_memory_s"] * 1e3, tm)
            check(row["tokens_per_s"], tps)
            assert row["limit"] == line.split()[6]
    assert {row["limit"] for row in tables[1][0]} == {"memory"}


def test_request_split_reproduces_course_line():
    split = request_split(LLAMA3_8B, H100, 2000, 500)
    assert split.decode_steps == 500
    assert f"{split.prefill_s * 1e3:.0f}" == "31"
    assert f"{split.decode_s * 1e3:.0f}" == "2284"
    assert f"{100 * split.decode_share:.0f}" == "99"
    assert split.prefill_share + split.decode_share == pytest.approx(1.0)
    # The course's decode sum: one step per output token at contexts 2000 .. 2499.
    by_hand = sum(rl.bound(H100, decode_cost(LLAMA3_8B, 1, c)).time for c in range(2000, 2500))
    assert split.decode_s == pytest.approx(by_hand, rel=1e-12)
