"""Persona loading: fixed order, tolerant of gaps, strict about encoding, capped."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry import persona


def test_order_well_known_first_then_alpha(tmp_path: Path) -> None:
    for name in ["zeta.md", "USER.md", "alpha.md", "PERSONA.md", "notes.txt", ".hidden.md"]:
        (tmp_path / name).write_text(f"# {name}\n")
    p = persona.load(tmp_path)
    assert p.files == ("PERSONA.md", "USER.md", "alpha.md", "zeta.md")
    assert p.text.index("PERSONA.md") < p.text.index("USER.md") < p.text.index("zeta.md")
    assert "hidden" not in p.text and "notes.txt" not in p.text


@given(st.lists(st.sampled_from([*persona.WELL_KNOWN, "a.md", "b.md", "Z.md"]), unique=True))
def test_order_is_a_permutation_with_known_prefix(names: list[str]) -> None:
    out = persona.order(names)
    assert sorted(out) == sorted(names)
    known = [n for n in out if n in persona.WELL_KNOWN]
    assert out[: len(known)] == known
    assert out[len(known):] == sorted(out[len(known):])


def test_missing_and_empty_dirs_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert persona.load(tmp_path / "nope").text == ""
    assert persona.load(tmp_path).text == ""
    assert "missing" in caplog.text and "no *.md" in caplog.text


def test_non_utf8_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "USER.md").write_bytes(b"caf\xe9")
    with pytest.raises(persona.PersonaError, match=r"USER\.md"):
        persona.load(tmp_path)


def test_size_cap(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "PERSONA.md").write_text("a" * 60)
    (tmp_path / "USER.md").write_text("b" * 60)
    (tmp_path / "x.md").write_text("c" * 60)
    p = persona.load(tmp_path, max_chars=100)
    assert p.truncated and len(p.text) <= 102 and p.files == ("PERSONA.md", "USER.md")
    assert "size cap" in caplog.text


def test_bom_and_whitespace_stripped(tmp_path: Path) -> None:
    (tmp_path / "PERSONA.md").write_text("\ufeff  You are Tim.  \n\n")
    (tmp_path / "empty.md").write_text("   \n")
    p = persona.load(tmp_path)
    assert p.text == "You are Tim." and p.files == ("PERSONA.md",)


def test_html_comments_are_operator_notes(tmp_path: Path) -> None:
    (tmp_path / "PERSONA.md").write_text("<!-- note\nfor the operator -->\nBe kind.<!-- x -->")
    (tmp_path / "USER.md").write_text("<!-- only a note -->")
    p = persona.load(tmp_path)
    assert p.text == "Be kind."
    assert p.files == ("PERSONA.md",)
