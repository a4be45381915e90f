"""Markdown → Telegram rendering and the UTF-16-aware splitter.

The splitter is tested by properties (any text, any entities) because its failure modes —
a part one unit too long, an entity offset off by a surrogate — only show on odd input.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gantry.channel.telegram import format as tgformat
from gantry.channel.telegram.format import (
    TELEGRAM_LIMIT,
    Entity,
    Rendered,
    render_markdown,
    to_aiogram,
    utf16_len,
)
from gantry.channel.telegram.split import split_message, split_text

# --- strategies ------------------------------------------------------------------------

_PIECES = st.sampled_from(
    [
        " ",
        "\n",
        "\n\n",
        "\r\n",
        "\r\n\r\n",
        "\t",
        "😀",
        "👍🏽",
        "👨‍👩‍👧",
        "🇺🇦",
        "e\u0301",
        "a\u0308\u0301",
        "𝔘𝔫𝔦",
        "word",
        "длинное",
        "中文字",
        "\u200d",
        "\ufe0f",
    ]
)
_TEXT = st.lists(
    st.one_of(_PIECES, st.text(min_size=1, max_size=30), st.text(alphabet="xy😀", min_size=20)),
    max_size=40,
).map("".join)


@st.composite
def rendered_inputs(draw: st.DrawFn) -> tuple[Rendered, int]:
    text = draw(_TEXT)
    limit = draw(st.integers(min_value=2, max_value=80))
    prefix = [0]
    for ch in text:
        prefix.append(prefix[-1] + utf16_len(ch))
    entities: list[Entity] = []
    if text:
        for _ in range(draw(st.integers(0, 6))):
            i = draw(st.integers(0, len(text) - 1))
            j = draw(st.integers(i + 1, len(text)))
            kind = draw(st.sampled_from(["bold", "pre", "code", "text_link"]))
            entities.append(
                Entity(
                    kind,
                    prefix[i],
                    prefix[j] - prefix[i],
                    url="https://e.x/" if kind == "text_link" else None,
                    language="py" if kind == "pre" else None,
                )
            )
    return Rendered(text, entities), limit


def _coverage(entities: list[Entity], base: int = 0) -> Counter[tuple[str, str | None, int]]:
    return Counter((e.type, e.url, base + u) for e in entities for u in range(e.offset, e.end))


def _check_parts(original: Rendered, parts: list[Rendered], limit: int) -> None:
    assert "".join(p.text for p in parts) == original.text
    if not original.text:
        assert parts == []
    base = 0
    pieces: Counter[tuple[str, str | None, int]] = Counter()
    for part in parts:
        n = utf16_len(part.text)
        assert 0 < n <= limit
        raw = part.text.encode("utf-16-le", "surrogatepass")
        raw.decode("utf-16-le")  # the part itself is valid UTF-16: no half pair at either end
        for e in part.entities:
            assert e.length > 0 and e.offset >= 0 and e.end <= n
            raw[: e.offset * 2].decode("utf-16-le")  # entity edges fall between characters
            raw[: e.end * 2].decode("utf-16-le")
        pieces += _coverage(part.entities, base)
        base += n
    assert pieces == _coverage(original.entities)


# --- splitter properties ---------------------------------------------------------------


@given(rendered_inputs())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_split_properties_small_limits(data: tuple[Rendered, int]) -> None:
    rendered, limit = data
    _check_parts(rendered, split_message(rendered, limit), limit)


@given(st.lists(_TEXT, min_size=1, max_size=30).map("".join), st.integers(2, 9000))
@settings(max_examples=60, deadline=None)
def test_split_text_any_limit(text: str, repeat: int) -> None:
    big = (text * (1 + repeat // max(1, len(text))))[:20_000]
    parts = split_text(big)
    assert "".join(parts) == big
    assert all(0 < utf16_len(p) <= TELEGRAM_LIMIT for p in parts)


@given(st.integers(1, 12_000), st.sampled_from(["x", "😀", "e\u0301", "ab ", "line\r\n"]))
@settings(max_examples=60, deadline=None)
def test_split_long_runs_at_telegram_limit(count: int, unit: str) -> None:
    text = unit * count
    rendered = Rendered(text, [Entity("pre", 0, utf16_len(text), language="txt")])
    parts = split_message(rendered)
    _check_parts(rendered, parts, TELEGRAM_LIMIT)
    assert all(p.entities and p.entities[0].type == "pre" for p in parts)


# Text without combining marks, ZWJ sequences or CR: here a hard cut never has to back off,
# so the minimum part size is exact rather than "where it can".
_PLAIN_PIECES = st.sampled_from(
    [" ", "\n", "\n\n", "\t", ". ", "! ", "。", "！", "😀", "word", "длинное", "中文字", "𝔘𝔫𝔦"]
)
_PLAIN_TEXT = st.lists(
    st.one_of(
        _PLAIN_PIECES,
        st.text(alphabet="ab .\n中文。😀", min_size=1, max_size=30),
        st.text(alphabet="xy😀中", min_size=20, max_size=200),
    ),
    max_size=40,
).map("".join)
_BREAK_ENDS = frozenset(" \t\n。！？")


@st.composite
def plain_inputs(draw: st.DrawFn) -> tuple[Rendered, int]:
    text = draw(_PLAIN_TEXT)
    limit = draw(st.integers(min_value=2, max_value=80))
    prefix = [0]
    for ch in text:
        prefix.append(prefix[-1] + utf16_len(ch))
    entities: list[Entity] = []
    if text:
        for _ in range(draw(st.integers(0, 4))):
            i = draw(st.integers(0, len(text) - 1))
            j = draw(st.integers(i + 1, min(len(text), i + draw(st.integers(1, 120)))))
            kind = draw(st.sampled_from(["bold", "pre", "text_link"]))
            url = "https://e.x/" if kind == "text_link" else None
            entities.append(Entity(kind, prefix[i], prefix[j] - prefix[i], url=url))
    return Rendered(text, entities), limit


def _check_no_fragments(original: Rendered, parts: list[Rendered], limit: int) -> None:
    """Every part but the last is at least half the limit, unless the next part starts with
    an entity that fits in one message (kept whole); a short part ends at a break point."""
    end = 0
    keep_starts = {e.offset for e in original.entities if e.length <= limit}
    for part in parts[:-1]:
        n = utf16_len(part.text)
        end += n
        assert n >= limit // 2 or end in keep_starts, (n, limit, part.text)
        if n < limit - 1 and end not in keep_starts:
            assert part.text[-1] in _BREAK_ENDS, part.text


@given(plain_inputs())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_split_never_leaves_a_fragment_unless_an_entity_forces_it(
    data: tuple[Rendered, int],
) -> None:
    rendered, limit = data
    parts = split_message(rendered, limit)
    _check_parts(rendered, parts, limit)
    _check_no_fragments(rendered, parts, limit)


@given(plain_inputs())
@settings(max_examples=200, deadline=None)
def test_split_without_entities_has_no_fragment_at_all(data: tuple[Rendered, int]) -> None:
    rendered, limit = data
    parts = split_text(rendered.text, limit)
    assert "".join(parts) == rendered.text
    assert all(utf16_len(p) >= limit // 2 for p in parts[:-1])


@given(rendered_inputs())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_split_never_separates_cr_from_lf(data: tuple[Rendered, int]) -> None:
    rendered, limit = data
    parts = split_message(rendered, limit)
    for a, b in itertools.pairwise(parts):
        assert not (a.text.endswith("\r") and b.text.startswith("\n"))


def test_one_early_space_does_not_make_a_tiny_first_part() -> None:
    text = "RE: " + "x" * 10_000
    parts = split_text(text)
    assert [utf16_len(p) for p in parts] == [4096, 4096, 10_004 - 8192]


def test_text_without_any_break_is_cut_hard_at_the_limit() -> None:
    blob = "QUJD" * 3000  # base64-like, 12,000 units
    assert [len(p) for p in split_text(blob)] == [4096, 4096, 3808]
    url = "see https://example.com/" + "a/b?c=d&" * 1500
    parts = split_text(url)
    assert utf16_len(parts[0]) == 4096 and "".join(parts) == url


def test_cjk_text_is_cut_at_sentence_ends() -> None:
    sentence = "これは日本語の文です。"  # 11 units, no spaces anywhere
    text = sentence * 1000
    parts = split_text(text)
    assert "".join(parts) == text
    assert all(p.endswith("。") for p in parts)
    assert all(utf16_len(p) >= 2048 for p in parts[:-1])
    chinese = "这是中文句子吗？是的！" * 800
    parts = split_text(chinese)
    assert all(p[-1] in "？！" and utf16_len(p) > 4000 for p in parts[:-1])


def test_cjk_text_without_punctuation_is_cut_hard_never_in_a_pair() -> None:
    text = "漢字𠀋" * 3000  # 𠀋 is astral: two units
    parts = split_text(text)
    assert "".join(parts) == text
    assert all(utf16_len(p) in (4095, 4096) for p in parts[:-1])
    for p in parts:
        p.encode("utf-16-le")  # no half pair at either end


def test_break_preference_within_the_last_half() -> None:
    def first(text: str) -> str:
        return split_text(text, 100)[0]

    # a blank line in the last half wins over a later line end
    assert first("a" * 60 + "\n\n" + "b" * 20 + "\n" + "c" * 100).endswith("a\n\n")
    # a blank line in the first half is ignored for a later line end
    assert first("a" * 20 + "\n\n" + "b" * 60 + "\n" + "c" * 100) == (
        "a" * 20 + "\n\n" + "b" * 60 + "\n"
    )
    # sentence end beats a later space; "3.14" is no sentence end
    assert first("w" * 55 + ". " + "x" * 20 + " 3.14" + "y" * 100).endswith("w. ")
    # a space when nothing better is in the last half
    assert first("v" * 70 + " " + "z" * 100) == "v" * 70 + " "
    # nothing in the last half: hard cut at the limit
    assert first("v" * 10 + " " + "z" * 200) == "v" * 10 + " " + "z" * 89


def test_raw_surrogate_pair_code_points_are_never_separated() -> None:
    text = "\ud83d\ude00" * 50
    for limit in (2, 3, 5):
        parts = split_text(text, limit)
        assert "".join(parts) == text
        for p in parts:
            assert not p.startswith("\ude00")
            assert utf16_len(p) <= limit


def test_hard_cut_keeps_combining_marks_with_their_base() -> None:
    text = "e\u0301" * 100
    for part in split_text(text, 7):
        assert not part.startswith("\u0301")


def test_empty_and_whitespace_contract() -> None:
    assert split_message(Rendered("", [])) == []
    assert split_text("") == []
    assert split_text("   ") == ["   "]
    with pytest.raises(ValueError):
        split_text("abc", 1)


def test_cut_prefers_paragraphs_and_keeps_whitespace_on_earlier_part() -> None:
    para = "word " * 100  # 500 units
    text = (para.strip() + "\n\n") * 20
    parts = split_text(text, 4096)
    assert len(parts) == 3
    assert all(p.endswith("\n\n") for p in parts)
    assert all(not p[0].isspace() for p in parts)


def test_cut_moves_before_a_code_block_instead_of_splitting_it() -> None:
    prose = "intro line\n" * 100  # 1100 units
    code = "x = 1\n" * 300  # 1800 units
    text = prose + code + "outro"
    pre = Entity("pre", len(prose), len(code), language="python")
    parts = split_message(Rendered(text, [pre]), limit=2500)
    assert parts[0].text == prose
    assert parts[1].entities == [Entity("pre", 0, len(code), language="python")]


def test_oversized_code_block_is_clipped_per_part() -> None:
    code = "print('hello')\n" * 700  # 10,500 units
    pre = Entity("pre", 0, len(code), language="python")
    parts = split_message(Rendered(code, [pre]))
    assert len(parts) == 3
    for p in parts:
        assert p.entities == [Entity("pre", 0, utf16_len(p.text), language="python")]
        assert p.text.endswith("\n")


# --- rendering -------------------------------------------------------------------------


def test_bold_italic_strike() -> None:
    r = render_markdown("Hello **bold**, *it* and ~~gone~~ 😀 **x**")
    assert r.text == "Hello bold, it and gone 😀 x"
    assert Entity("bold", 6, 4) in r.entities
    assert Entity("italic", 12, 2) in r.entities
    assert Entity("strikethrough", 19, 4) in r.entities
    assert Entity("bold", 27, 1) in r.entities  # 😀 counts two units


def test_code_block_and_inline_code() -> None:
    r = render_markdown("Run `ls`:\n\n```bash\nls -la\necho hi\n```\nDone.")
    assert r.text == "Run ls:\n\nls -la\necho hi\nDone."
    assert Entity("code", 4, 2) in r.entities
    assert Entity("pre", 9, 14, language="bash") in r.entities


def test_links_are_kept_only_when_telegram_accepts_the_url() -> None:
    r = render_markdown(
        "[docs](https://ex.com/a_b) [rel](/x) [js](javascript:alert(1)) [w](www.ex.com)"
    )
    assert r.text == "docs rel js w"
    links = [e for e in r.entities if e.type == "text_link"]
    assert links == [
        Entity("text_link", 0, 4, url="https://ex.com/a_b"),
        Entity("text_link", 12, 1, url="http://www.ex.com"),
    ]


def test_nested_list() -> None:
    r = render_markdown("- one\n- two\n  - nested **deep**\n  - more\n1. first\n2. second")
    lines = r.text.splitlines()
    assert lines[0].endswith("one") and lines[1].endswith("two")
    assert lines[2].startswith("  ") and lines[2].endswith("nested deep")
    assert "1. first" in r.text and "2. second" in r.text
    (bold,) = [e for e in r.entities if e.type == "bold"]
    assert r.text[bold.offset : bold.end] == "deep"


def test_code_block_inside_list_item_gets_its_own_line() -> None:
    r = render_markdown("- install:\n  ```sh\n  pip install x\n  ```\n- done")
    (pre,) = [e for e in r.entities if e.type == "pre"]
    assert r.text[pre.offset : pre.end] == "pip install x"
    assert r.text[pre.offset - 1] == "\n" and r.text[pre.end] == "\n"


def test_heading_is_bold_without_emoji_prefix() -> None:
    r = render_markdown("# Title\n\ntext")
    assert r.text.startswith("Title\n")
    assert Entity("bold", 0, 5) in r.entities


@pytest.mark.parametrize("src", ["a * b ** c _d `e", "**unclosed bold", "*", "__", "[x](", "```"])
def test_unbalanced_markup_never_crashes_and_keeps_words(src: str) -> None:
    r = render_markdown(src)
    for word in ("a", "b", "c", "unclosed", "bold"):
        if word in src.split():
            assert word in r.text
    for e in r.entities:
        assert e.offset >= 0 and e.end <= utf16_len(r.text)


def test_raw_html_is_shown_not_dropped() -> None:
    r = render_markdown("Use List<String> here.<br>Then <div>x</div>")
    assert "List<String>" in r.text and "<br>" in r.text and "<div>x</div>" in r.text


def test_lone_surrogate_is_replaced() -> None:
    r = render_markdown("a\ud800 **b**")
    assert r.text == "a\ufffd b"
    r.text.encode("utf-8")


def test_converter_failure_falls_back_to_plain_text(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import telegramify_markdown

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("parser exploded")

    monkeypatch.setattr(telegramify_markdown, "convert", boom)
    with caplog.at_level(logging.WARNING, logger="gantry.channel.tgformat"):
        r = render_markdown("**x**")
    assert r == Rendered("**x**", [])
    assert any("plain text" in rec.getMessage() for rec in caplog.records)


def test_oversized_input_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tgformat, "MAX_RENDER_CHARS", 10)
    assert render_markdown("**0123456789**") == Rendered("**0123456789**", [])


def test_ten_thousand_char_reply_splits_into_three_parts() -> None:
    para = "Some **bold** words and `code` here, plus a [link](https://ex.com). " * 2
    md = "\n\n".join(f"Paragraph {i}: {para}" for i in range(100))
    rendered = render_markdown(md)
    assert 9_500 <= utf16_len(rendered.text) <= 11_000
    parts = split_message(rendered)
    assert len(parts) == 3
    _check_parts(rendered, parts, TELEGRAM_LIMIT)
    for p in parts:
        for e in p.entities:
            if e.type == "bold":
                assert p.text[e.offset : e.end] == "bold"


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_render_never_raises_and_entities_fit(md: str) -> None:
    r = render_markdown(md)
    n = utf16_len(r.text)
    r.text.encode("utf-8")
    for e in r.entities:
        assert e.length > 0 and e.offset >= 0 and e.end <= n


def test_to_aiogram_and_bot_api_shape() -> None:
    ents = [Entity("pre", 0, 3, language="py"), Entity("bold", 1, 1)]
    assert ents[1].to_bot_api() == {"type": "bold", "offset": 1, "length": 1}
    converted = to_aiogram(ents)
    assert converted[0].type == "pre" and converted[0].language == "py"
    assert converted[1].url is None
