"""An OGG/Opus file checked and measured (pure): what Telegram shows as a voice note.

A speech service asked for opus may still answer something else (an error page with status
200, MP3 from one that ignores the format): Telegram would show that as a file, or refuse it.
So the audio is checked before it is sent: OGG pages with valid checksums, the first holding
an `OpusHead`; its length comes from the last page's granule position (48 kHz samples).
"""

from __future__ import annotations

import struct

import msgspec

OPUS_RATE = 48_000
_HEADER = struct.Struct("<4sBBqIIIB")  # capture, version, flags, granule, serial, seq, crc, segs


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
        table.append(crc & 0xFFFFFFFF)
    return table


_CRC = _table()


def page_crc(page: bytes) -> int:
    """OGG's CRC-32 (polynomial 0x04C11DB7, not reflected, initial 0) of a whole page whose
    checksum field is zeroed."""
    crc = 0
    for byte in page:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _CRC[(crc >> 24) ^ byte]
    return crc


class OpusFile(msgspec.Struct, frozen=True):
    seconds: float
    pages: int
    channels: int


def opus_file(data: bytes) -> OpusFile | None:
    """The file's length and pages if `data` is OGG/Opus whose every page is intact, else
    None. Never raises."""
    pos, pages, granule = 0, 0, -1
    pre_skip = channels = 0
    while pos < len(data):
        if len(data) - pos < _HEADER.size:
            return None
        capture, version, flags, page_granule, _serial, _seq, crc, count = _HEADER.unpack_from(
            data, pos)
        body_at = pos + _HEADER.size + count
        if capture != b"OggS" or version != 0 or body_at > len(data):
            return None
        size = sum(data[pos + _HEADER.size : body_at])
        end = body_at + size
        if end > len(data):
            return None
        page = bytearray(data[pos:end])
        page[22:26] = b"\0\0\0\0"
        if page_crc(bytes(page)) != crc:
            return None
        if pages == 0:
            body = data[body_at:end]
            if not flags & 0x02 or len(body) < 19 or body[:8] != b"OpusHead":
                return None
            channels = body[9]
            pre_skip = int.from_bytes(body[10:12], "little")
        if page_granule >= 0:
            granule = page_granule
        pages += 1
        pos = end
    if pages < 2 or granule < 0 or channels == 0:
        return None
    return OpusFile(max(0, granule - pre_skip) / OPUS_RATE, pages, channels)
