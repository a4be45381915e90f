"""The proxy variables the model client obeys, checked at boot.

The model client is an httpx.AsyncClient(trust_env=True): when it is made, httpx reads
HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY (any case) and raises on a value it cannot
use. gantry makes that client at the first model call, so without this check such a value
would fail every turn instead of the boot. The variables are read here as urllib and httpx
read them, and each proxy or NO_PROXY entry is handed to httpx's own URL parser and Proxy,
so the verdict is httpx's (tests/test_proxyenv.py holds it to the client's). httpx is
imported only when a proxy variable is set, and only by the commands that make model calls.
Telegram's aiohttp session ignores these variables (its trust_env is off).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gantry.log import REDACTED

SCHEMES = ("http", "https", "socks5", "socks5h")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_STAND_IN = "user:password"
_SHOWN_MAX = 80
_LOGIN = ("the part before @, not shown, cannot be parsed: in user:password percent-encode "
          "every character but letters, digits and - . _ ~")


def read(environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """scheme → (variable, value) of every `<scheme>_proxy` variable, read as
    urllib.request.getproxies_environment reads os.environ (httpx's source): any case, an
    all-lower-case `_proxy` name wins (set empty, it unsets), HTTP_PROXY is ignored under
    CGI. The variable's own spelling is kept, so a message names what the operator set."""
    found: dict[str, tuple[str, str]] = {}
    for name, value in environ.items():
        if value and name.lower().endswith("_proxy"):
            found[name.lower()[:-6]] = (name, value)
    if "REQUEST_METHOD" in environ:
        found.pop("http", None)
    for name, value in environ.items():
        if name.endswith("_proxy"):
            if value:
                found[name.lower()[:-6]] = (name, value)
            else:
                found.pop(name.lower()[:-6], None)
    return found


def mounts(environ: Mapping[str, str]) -> dict[str, tuple[str, str, str | None]]:
    """URL pattern → (variable, its raw entry, proxy URL or None for a NO_PROXY bypass),
    built as httpx's get_environment_proxies builds its mounts (a NO_PROXY pattern replaces
    a proxy of the same key); empty when none is set or NO_PROXY lists `*`."""
    found = read(environ)
    out: dict[str, tuple[str, str, str | None]] = {}
    for scheme in ("http", "https", "all"):
        if scheme in found:
            name, value = found[scheme]
            out[f"{scheme}://"] = (name, value, value if "://" in value else f"http://{value}")
    name, value = found.get("no", ("NO_PROXY", ""))
    for host in (h.strip() for h in value.split(",")):
        if host == "*":
            return {}
        if not host:
            continue
        if "://" in host:
            key = host
        elif _is_ip(host, 4):
            key = f"all://{host}"
        elif _is_ip(host, 6):
            key = f"all://[{host}]"
        elif host.lower() == "localhost":
            key = f"all://{host}"
        else:
            key = f"all://*{host}"
        out[key] = (name, host, None)
    return out


def _is_ip(host: str, version: int) -> bool:
    import ipaddress

    try:
        (ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address)(host.split("/")[0])
    except Exception:  # as httpx's is_ipv4_hostname / is_ipv6_hostname
        return False
    return True


def problems(environ: Mapping[str, str]) -> list[str]:
    """One operator-facing line per proxy variable that would make
    httpx.AsyncClient(trust_env=True) raise, saying what to do; [] when it would not.
    Whatever precedes an @ in a value (a proxy login) is never shown."""
    table = mounts(environ)
    if not table:
        return []
    bad: dict[str, list[tuple[str, str]]] = {}
    for key, (name, raw, proxy) in table.items():
        why = _explained(key if proxy is None else proxy, proxy=proxy is not None)
        if why:
            bad.setdefault(name, []).append((_shown(raw), why))
    return [_line(name, entries) for name, entries in bad.items()]


def _line(name: str, entries: list[tuple[str, str]]) -> str:
    """The config error for one variable: what is wrong with it, then what to do."""
    if name.lower() == "no_proxy":
        listed = ", ".join(f"{shown} ({why})" for shown, why in entries)
        return (f"{name} has entries the model client cannot read: {listed}; list host "
                "names, IP addresses or .domains separated by commas, or unset it")
    (shown, why), = entries
    return (f"{name}={shown} is not a proxy URL the model client can use ({why}); set it to "
            "http://host:port (a proxy login goes before the host, as user:password@), or unset it")


def _explained(url: str, *, proxy: bool) -> str | None:
    """Why httpx cannot use `url`, or None. httpx's reasons quote the part they stumbled on,
    so for a URL with a login the reason given is that of the same URL with a stand-in
    login: a fault outside the login is still named, one inside it is never quoted."""
    why = _fault(url, proxy=proxy)
    if why is None or "@" not in url:
        return why
    return _fault(_with_login(url, _STAND_IN), proxy=proxy) or _LOGIN


def _fault(url: str, *, proxy: bool) -> str | None:
    """httpx's own verdict: its URL parser, then for a NO_PROXY pattern what its URLPattern
    reads (a host name is IDNA-decoded), for a proxy what the transport the client would
    mount for it does that can raise (encode the login, import socksio for SOCKS). The
    transport itself is not made: that imports httpcore, which the model client defers to
    its first call."""
    import httpx

    try:
        parsed = httpx.URL(url)
        if not proxy:
            _ = parsed.scheme, parsed.host, parsed.port
            return None
        if parsed.scheme not in SCHEMES:
            scheme = f"scheme {parsed.scheme!r}" if parsed.scheme else "no scheme"
            return f"{scheme}; a proxy must be {', '.join(SCHEMES[:-1])} or {SCHEMES[-1]}"
        _ = httpx.Proxy(parsed).raw_auth  # encodes the login, as the transport does
        if parsed.scheme.startswith("socks"):
            import socksio  # noqa: F401  (as httpx's transport does, at the client's making)
    except ImportError:
        return "SOCKS needs the socksio package, which this gantry does not include"
    except Exception as exc:  # InvalidURL is no ValueError; a lone surrogate: UnicodeError
        return " ".join(str(exc).split())[: 2 * _SHOWN_MAX] or type(exc).__name__
    return None


def _with_login(value: str, login: str) -> str:
    """`value` with everything before its last @ but its scheme replaced by `login`. What
    precedes a `://` is kept only if it is scheme-shaped: a password holds `://` at times,
    but always follows a colon, which no scheme has."""
    head, sep, rest = value.partition("://")
    if not _SCHEME.fullmatch(head):
        head, sep, rest = "", "", value
    if "@" in rest:
        rest = f"{login}@{rest.rpartition('@')[2]}"
    return f"{head}{sep}{rest}"


def _shown(value: str) -> str:
    """The value as an error message shows it: any login hidden, bounded, printable."""
    shown = _with_login(value, REDACTED)
    return repr(shown if len(shown) <= _SHOWN_MAX else shown[: _SHOWN_MAX - 1] + "…")
