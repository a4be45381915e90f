"""gantry.store.examine.parse_header: the pure part of the boot check, on any bytes."""

from __future__ import annotations

from pathlib import Path

import apsw
from hypothesis import given
from hypothesis import strategies as st

from gantry.store.examine import MAGIC, parse_header


@given(st.binary(max_size=200))
def test_anything_without_the_magic_is_not_a_header(data: bytes) -> None:
    if not data.startswith(MAGIC):
        assert parse_header(data) is None


@given(st.binary(min_size=84, max_size=84), st.sampled_from([1, 512, 1024, 4096, 32768]))
def test_a_header_reads_back_its_page_size(rest: bytes, raw: int) -> None:
    head = MAGIC + raw.to_bytes(2, "big") + rest
    h = parse_header(head)
    assert h is not None and h.page_size == (65536 if raw == 1 else raw)
    counter, valid_for = head[24:28], head[92:96]
    assert h.pages == (int.from_bytes(head[28:32], "big") if counter == valid_for else 0)


IMPOSSIBLE = st.integers(min_value=0, max_value=65535).filter(
    lambda n: n != 1 and (n < 512 or bool(n & (n - 1))))


@given(IMPOSSIBLE)
def test_an_impossible_page_size_is_not_a_header(raw: int) -> None:
    assert parse_header(MAGIC + raw.to_bytes(2, "big") + bytes(82)) is None


def test_a_real_database_header(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE t (x); INSERT INTO t VALUES (randomblob(20000))")
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])  # type: ignore[index]
    size = int(conn.execute("PRAGMA page_size").fetchone()[0])  # type: ignore[index]
    conn.close()
    h = parse_header(path.read_bytes()[:100])
    assert h is not None and (h.page_size, h.pages) == (size, pages)
    assert h.expected_bytes == path.stat().st_size
