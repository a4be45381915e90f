"""systemd's sd_notify over $NOTIFY_SOCKET: READY=1 at start, WATCHDOG=1 per heartbeat."""

from __future__ import annotations

import os
import socket


def notify(state: str) -> bool:
    """Send `state` to the service manager; a no-op (False) when not under systemd."""
    path = os.environ.get("NOTIFY_SOCKET", "")
    if not path:
        return False
    addr = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall(state.encode())
    except OSError:
        return False
    return True
