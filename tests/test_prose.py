"""Numbers written for sentences, code and tables shown on the page."""

import pandas as pd

from lib import prose


def test_span_prints_one_number_when_the_ends_agree():
    assert prose.span(1.04, 1.06) == "1.0\u20131.1"
    assert prose.span(2.0, 2.04, unit="ms") == "2.0 ms"


def test_ms_and_tokens():
    assert prose.ms(0.1234) == "123 ms" and prose.ms(0.01234) == "12.3 ms" and prose.ms(0.001234) == "1.2 ms" and prose.ms(0.000567) == "0.57 ms"
    assert prose.tokens(1) == "1 token" and prose.tokens(1024) == "1,024 tokens"


def test_table_is_whole_escaped_and_renders_bold():
    long = "x" * 300
    html = prose.table(pd.DataFrame({"claim": ["a"], "measured": [f"**166 ms** <script>{long}"]})).data
    assert "<b>166 ms</b>" in html and "&lt;script&gt;" in html and long in html and "…" not in html


def test_source_shows_the_function():
    assert "def span" in prose.source(prose.span).data
