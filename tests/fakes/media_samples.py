"""Small media files made on the spot for tests and bench/media.py: a JPEG-looking blob (the
bytes are only passed through, never decoded), a text PDF written by hand, an OGG-looking
voice note."""

from __future__ import annotations

import random


def jpeg(size: int = 40_000, seed: int = 1) -> bytes:
    """`size` bytes starting with a JPEG signature (gantry checks the magic, not the pixels)."""
    body = random.Random(seed).randbytes(max(0, size - 6))
    return b"\xff\xd8\xff\xe0\x00\x10" + body


def ogg(size: int = 6_000, seed: int = 2) -> bytes:
    return b"OggS\x00\x02" + random.Random(seed).randbytes(max(0, size - 6))


def pdf(*pages: str) -> bytes:
    """A valid PDF with one page per string, each drawn as text in Helvetica (so pypdf can
    extract it): objects, xref table and trailer laid out by hand."""
    objects: list[bytes] = []
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    font = 3 + 2 * len(pages)
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    for i, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 14 Tf 20 100 Td ({escaped}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 144] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
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
