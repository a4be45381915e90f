"""aigpt interop: TIDs, the record layout, export → import round trip."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry import db
from gantry.memory.atproto import (
    ALPHABET,
    decode_tid,
    encode_tid,
    export,
    import_dir,
    micros_of,
    next_tid,
    tid_for,
    tid_micros,
)
from gantry.memory.store import MemoryStore

DID = "did:plc:abc123"


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore(db.connect(tmp_path / "a.db"))


@given(st.integers(0, (1 << 63) - 1), st.integers(0, (1 << 63) - 1))
def test_tids_sort_like_their_values(a: int, b: int) -> None:
    ta, tb = encode_tid(a), encode_tid(b)
    assert len(ta) == 13 and set(ta) <= set(ALPHABET)
    assert decode_tid(ta) == a
    assert (ta < tb) == (a < b)


def test_next_tid_never_collides_and_follows_time() -> None:
    tids = [next_tid(1_700_000_000_000_000) for _ in range(2000)]  # the same microsecond
    assert len(set(tids)) == len(tids) and tids == sorted(tids)
    later = next_tid(1_800_000_000_000_000)
    assert later > tids[-1] and tid_micros(later) == 1_800_000_000_000_000


def test_tid_time_matches_atproto_layout() -> None:
    assert tid_micros(tid_for(1_700_000_000_123_456, 5)) == 1_700_000_000_123_456
    assert decode_tid(tid_for(0, 5)) == 5
    with pytest.raises(ValueError):
        decode_tid("0000000000000")  # '0' is not in the alphabet


def test_export_writes_aigpt_layout_and_import_round_trips(
    store: MemoryStore, tmp_path: Path
) -> None:
    store.add("person", "mom", "prefers calls over texts", created_at="2026-03-01T12:00:00Z")
    store.add("fact", "", "syuiはRustを好む", created_at="2026-03-01T12:00:00.000001Z")
    store.add("episode", "gym", "sent the blue route")
    superseded, _ = store.add("fact", "x", "old")
    newer, _ = store.add("fact", "x", "new")
    store.supersede([int(superseded.id)], int(newer.id))
    n, root = export(store, tmp_path / "out", DID, "You are Tim.", handle="tim.example")
    assert n == 4 and root == tmp_path / "out" / DID
    files = sorted((root / "ai.syui.gpt.memory").glob("*.json"))
    assert len(files) == 4 and all(len(f.stem) == 13 for f in files)
    first: dict[str, Any] = json.loads(files[0].read_text())
    assert first == {
        "uri": f"at://{DID}/ai.syui.gpt.memory/{files[0].stem}",
        "value": {"$type": "ai.syui.gpt.memory", "did": DID,
                  "content": {"$type": "ai.syui.gpt.memory#markdown",
                              "text": "(person) mom: prefers calls over texts"},
                  "createdAt": "2026-03-01T12:00:00.000000Z"},
    }
    assert tid_micros(files[0].stem) == 1_772_366_400_000_000  # TIDs carry createdAt
    core = json.loads((root / "ai.syui.gpt.core" / "self.json").read_text())
    assert core["uri"] == f"at://{DID}/ai.syui.gpt.core/self"
    assert core["value"]["$type"] == "ai.syui.gpt.core" and core["value"]["handle"] == "tim.example"
    assert core["value"]["content"] == {"$type": "ai.syui.gpt.core#markdown",
                                        "text": "You are Tim."}

    other = MemoryStore(db.connect(tmp_path / "b.db"))
    result = import_dir(other, tmp_path / "out", DID)
    assert (result.added, result.duplicates, result.skipped, result.core_chars) == (4, 0, [], 12)
    key = lambda r: (r.kind, r.subject, r.content, r.created_at, r.expires_at)  # noqa: E731
    assert sorted(map(key, other.active_all())) == sorted(map(key, store.active_all()))
    again = import_dir(other, tmp_path / "out", DID)
    assert (again.added, again.duplicates) == (0, 4)


def test_import_reads_what_aigpt_writes_and_skips_junk(store: MemoryStore, tmp_path: Path) -> None:
    mem = tmp_path / "in" / DID / "ai.syui.gpt.memory"
    mem.mkdir(parents=True)
    tid = tid_for(1_772_366_400_000_000)
    (mem / f"{tid}.json").write_text(json.dumps({  # aigpt's writer adds a version field
        "uri": f"at://{DID}/ai.syui.gpt.memory/{tid}",
        "value": {"$type": "ai.syui.gpt.memory", "did": DID, "version": 3,
                  "content": {"$type": "ai.syui.gpt.memory#markdown", "text": "原神プレイヤー"},
                  "createdAt": "2026-03-01T12:00:00Z"}}))
    no_time = tid_for(1_772_452_800_000_000)
    (mem / f"{no_time}.json").write_text(json.dumps({"value": {"content": {"text": "no date"}}}))
    (mem / "broken.json").write_text("{not json")
    (mem / "empty.json").write_text(json.dumps({"value": {"content": {"text": "  "}}}))
    result = import_dir(store, tmp_path / "in", DID)
    assert result.added == 2 and len(result.skipped or []) == 2
    rows = {r.content: r for r in store.active_all()}
    assert rows["原神プレイヤー"].created_at == "2026-03-01T12:00:00.000000Z"
    assert rows["no date"].created_at == "2026-03-02T12:00:00.000000Z"  # from its TID
    assert rows["原神プレイヤー"].source == "import"


@pytest.mark.parametrize("did", ["", "..", "a/b"])
def test_bad_did_is_refused(store: MemoryStore, tmp_path: Path, did: str) -> None:
    with pytest.raises(ValueError, match="cannot name a directory"):
        export(store, tmp_path, did, "")


def test_missing_directory_says_so(store: MemoryStore, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="check DIR and --did"):
        import_dir(store, tmp_path, DID)


def test_micros_before_1970_are_exact() -> None:
    assert micros_of("1969-12-31T23:59:59.5Z") == -500_000
    assert micros_of("1970-01-01T00:00:00.000001Z") == 1


@given(st.datetimes(timezones=st.just(UTC)))
def test_micros_of_is_exact_for_any_time(dt: datetime) -> None:
    assert micros_of(dt.isoformat()) == (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
        microseconds=1)


def test_export_tids_sort_by_time_outside_the_tid_range_too(
    store: MemoryStore, tmp_path: Path
) -> None:
    """A TID holds 1970-2255; rows outside clamp to its ends instead of wrapping around, so
    aigpt still reads them oldest first, and a bad hand-edited date is a clear error."""
    for when in ("0999-01-01T00:00:00Z", "1969-07-20T20:17:40Z", "2026-03-01T12:00:00Z",
                 "2300-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"):
        store.add("fact", "era", f"dated {when}", created_at=when)
    n, root = export(store, tmp_path / "out", DID, "core")
    files = sorted((root / "ai.syui.gpt.memory").glob("*.json"))
    created = [json.loads(p.read_text())["value"]["createdAt"] for p in files]
    assert n == 5 and created == sorted(created)
    store.conn.execute("UPDATE memory SET created_at = 'now' WHERE id = 3")
    with pytest.raises(ValueError, match=r"memory #3: created_at 'now' is not a time"):
        export(store, tmp_path / "again", DID, "core")


def test_import_skips_json_nested_too_deep(store: MemoryStore, tmp_path: Path) -> None:
    mem = tmp_path / "in" / DID / "ai.syui.gpt.memory"
    mem.mkdir(parents=True)
    (mem / "deep.json").write_text("[" * 200_000)
    (mem / "ok.json").write_text(json.dumps({"value": {"content": {"text": "fine"},
                                                       "createdAt": "2026-03-01T12:00:00Z"}}))
    result = import_dir(store, tmp_path / "in", DID)
    assert result.added == 1 and [s.split(":")[0] for s in result.skipped or []] == ["deep.json"]
