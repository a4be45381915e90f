"""The one ELF question the build asks: which loader (PT_INTERP) a binary wants.

Read from the binaries of the running platform instead of naming any platform's loader, so the
same build runs on every Linux architecture (tests/test_build_platform.py feeds it several). No
Nuitka import here: the unit tests load it without the build extra.
"""

from __future__ import annotations

import struct

PT_INTERP = 3


def elf_interpreter(image: bytes) -> str | None:
    """The PT_INTERP path an ELF image asks the kernel for, None if it has none (static).

    Any class and byte order; nothing here reads the machine field.
    """
    if image[:4] != b"\x7fELF" or image[4] not in (1, 2) or image[5] not in (1, 2):
        raise ValueError("not an ELF image")
    wide, order = image[4] == 2, "<" if image[5] == 1 else ">"
    if wide:
        phoff = struct.unpack_from(order + "Q", image, 0x20)[0]
        phentsize, phnum = struct.unpack_from(order + "HH", image, 0x36)
        offset_at, size_at, word = 8, 32, "Q"
    else:
        phoff = struct.unpack_from(order + "I", image, 0x1C)[0]
        phentsize, phnum = struct.unpack_from(order + "HH", image, 0x2A)
        offset_at, size_at, word = 4, 16, "I"
    for i in range(phnum):
        entry = phoff + i * phentsize
        if struct.unpack_from(order + "I", image, entry)[0] != PT_INTERP:
            continue
        offset = struct.unpack_from(order + word, image, entry + offset_at)[0]
        size = struct.unpack_from(order + word, image, entry + size_at)[0]
        return image[offset:offset + size].rstrip(b"\0").decode()
    return None


