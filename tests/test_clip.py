"""gantry.clip: bounded one-line text, cut between words (issue 36 #3)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gantry.clip import clip


def test_a_cut_falls_between_words_and_is_marked() -> None:
    text = "could not connect: ConnectError: All connection attempts failed"
    assert clip(text, 200) == text
    assert clip(text, 60) == "could not connect: ConnectError: All connection attempts…"
    assert clip("x" * 50, 10) == "x" * 9 + "…"  # one long word: cut inside it, still marked
    assert clip("  a\n b\t", 10) == "a b"


@given(st.text(max_size=400), st.integers(min_value=0, max_value=300))
def test_clip_is_bounded_and_keeps_a_prefix(text: str, limit: int) -> None:
    out = clip(text, limit)
    flat = " ".join(text.split())
    assert len(out) <= limit
    if out == flat:
        return
    assert limit == 0 or out.endswith("…")
    kept = out[:-1]
    assert flat.startswith(kept)
    room = limit - 1
    # a whole word is kept, unless no space falls in the second half of the room
    assert flat[len(kept)] == " " or " " not in flat[room // 2 : room]
