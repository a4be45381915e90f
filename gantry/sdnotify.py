"""The systemd notify protocol, without libsystemd: one datagram to $NOTIFY_SOCKET.

    notify("READY=1")       # after boot, so `Type=notify` units become active
    notify("WATCHDOG=1")    # at least every WatchdogSec/2 while healthy
    notify("STOPPING=1")    # when shutdown begins
    notify("STATUS=receiving on telegram")   # the line `systemctl status` shows

A no-op (returns False) when NOTIFY_SOCKET is unset, e.g. under Docker or Kubernetes.
Never raises: a broken notify socket must not take the agent down.
"""

from __future__ import annotations

import os
import socket

__all__ = ["notify", "status_line"]


def status_line(channel: str, **counts: int) -> str:
    """The one-line STATUS= text: what gantry receives on, then any counts given.

    status_line("telegram") -> "receiving on telegram"; counts are how later parts (MCP tools,
    servers) add themselves: status_line("stdio", tools=3) -> "receiving on stdio; 3 tools".
    """
    parts = [f"{n} {name}" for name, n in counts.items()]
    line = f"receiving on {channel}" + ("; " + ", ".join(parts) if parts else "")
    return " ".join(line.split())  # one line: a newline would start a new assignment


def notify(state: str) -> bool:
    """Send `state` (newline-separated KEY=VALUE assignments); True if the datagram was sent."""
    addr = os.environ.get("NOTIFY_SOCKET", "")
    if not addr or not state:
        return False
    if addr[0] == "@":  # Linux abstract namespace
        target: str | bytes = b"\0" + addr[1:].encode()
    elif addr[0] == "/":
        target = addr
    else:
        return False  # vsock and other schemes are not supported
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(target)
            sock.sendall(state.encode())
    except (OSError, UnicodeError, ValueError):
        return False
    return True
