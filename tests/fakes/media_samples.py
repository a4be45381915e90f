"""Small media files made on the spot for tests and bench/media.py: a JPEG-looking blob (the
bytes are only passed through, never decoded), PDFs written by hand (with text; heavy for
pypdf; a zip bomb), an OGG-looking voice note, and a valid OGG/Opus file (speech)."""

from __future__ import annotations

import random
import struct
import zlib


def jpeg(size: int = 40_000, seed: int = 1) -> bytes:
    """`size` bytes starting with a JPEG signature (gantry checks the magic, not the pixels)."""
    body = random.Random(seed).randbytes(max(0, size - 6))
    return b"\xff\xd8\xff\xe0\x00\x10" + body


def ogg(size: int = 6_000, seed: int = 2) -> bytes:
    return b"OggS\x00\x02" + random.Random(seed).randbytes(max(0, size - 6))


def _ogg_crc(page: bytes) -> int:
    """OGG's page checksum, bit by bit (gantry.media.ogg has its own, table-driven)."""
    crc = 0
    for byte in page:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if crc & 0x80000000 else crc << 1
    return crc


def _ogg_page(packets: list[bytes], granule: int, seq: int, flags: int) -> bytes:
    lacing = b""
    for packet in packets:
        lacing += b"\xff" * (len(packet) // 255) + bytes([len(packet) % 255])
    head = struct.pack("<4sBBqIIIB", b"OggS", 0, flags, granule, 0x6A6E7421, seq, 0,
                       len(lacing))
    page = head + lacing + b"".join(packets)
    return page[:22] + struct.pack("<I", _ogg_crc(page)) + page[26:]


SILENT_OPUS_FRAME = b"\xf8\xff\xfe"  # one 20 ms CELT frame of silence (TOC 0xf8)


def ogg_opus(seconds: float = 1.0, pre_skip: int = 312) -> bytes:
    """A valid OGG/Opus file of `seconds` of silence: OpusHead, OpusTags, then 20 ms packets,
    50 to a page, the last page marked end of stream; granule positions at 48 kHz."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, pre_skip, 48_000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 4) + b"fake" + struct.pack("<I", 0)
    pages = [_ogg_page([head], 0, 0, 0x02), _ogg_page([tags], 0, 1, 0)]
    frames = max(1, round(seconds * 50))
    done = 0
    while done < frames:
        batch = min(50, frames - done)
        done += batch
        last = done == frames
        pages.append(_ogg_page([SILENT_OPUS_FRAME] * batch, pre_skip + done * 960,
                               len(pages), 0x04 if last else 0))
    return b"".join(pages)


HELVETICA = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
EMPTY_TEXT = b"BT () Tj ET "  # a text object that draws nothing: pypdf still works through it


def pdf(*pages: str) -> bytes:
    """A valid PDF with one page per string, each drawn as text in Helvetica (so pypdf can
    extract it)."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    font = 3 + 2 * len(pages)
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    for i, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 14 Tf 20 100 Td ({escaped}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 144] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(HELVETICA)
    return layout(objects)


def shared_stream_pdf(pages: int, stream: bytes, filters: str = "/FlateDecode") -> bytes:
    """`pages` pages that all draw one content stream (object 3, already encoded by
    `filters`): each page makes pypdf parse the whole stream again."""
    kids = " ".join(f"{5 + i} 0 R" for i in range(pages))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
               f"<< /Filter {filters} /Length {len(stream)} >>\nstream\n".encode() + stream
               + b"\nendstream",
               HELVETICA]
    page = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 144] /Contents 3 0 R "
            b"/Resources << /Font << /F1 4 0 R >> >> >>")
    return layout(objects + [page] * pages)


def heavy_pdf(pages: int = 40, repeats: int = 185_000) -> bytes:
    """Issue 35's shape: ~10 KB, `pages` pages sharing ONE compressed content stream of
    empty text objects (2.2 MB inflated), minutes of pypdf's time for no text at all."""
    return shared_stream_pdf(pages, zlib.compress(EMPTY_TEXT * repeats, 9))


def bomb_pdf(inflated: int = 300 << 20) -> bytes:
    """A page whose FlateDecode stream inflates to `inflated` bytes (300 MB) of empty text
    objects; deflated twice, so the file is a few KB."""
    once = deflate_repeated(EMPTY_TEXT * 87_381, max(1, inflated // (len(EMPTY_TEXT) * 87_381)))
    return shared_stream_pdf(1, zlib.compress(once, 9), "[/FlateDecode /FlateDecode]")


def deflate_repeated(chunk: bytes, times: int) -> bytes:
    """zlib data of `chunk` repeated `times` times, made without compressing it all: after a
    full flush the deflater starts afresh, so every chunk's block is the same bytes."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflater.compress(chunk) + deflater.flush(zlib.Z_FULL_FLUSH)
    check = 1
    for _ in range(times):
        check = zlib.adler32(chunk, check)
    return b"\x78\xda" + block * times + deflater.flush() + check.to_bytes(4, "big")


def layout(objects: list[bytes]) -> bytes:
    """Numbered objects, the xref table and the trailer laid out by hand (object 1 is the
    catalog)."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)
