"""How a server's failures are told: the cause inside exception groups, in one line, redacted."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class ServerStartError(Exception):
    """A server could not start or initialize; `str()` names it and its last stderr lines."""


def cause(exc: BaseException) -> BaseException:
    """The exception inside (nested) task-group exception groups: a ServerStartError if there
    is one, else the first."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    found = exc.subgroup(ServerStartError)
    inner: BaseException = found if found is not None else exc
    while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
        inner = inner.exceptions[0]
    return inner


def redacted(text: str) -> str:
    """Text for /status and check: header values, URL keys and tokens hidden."""
    from gantry.log import Redactor

    return Redactor().text(text)


def besides(text: str, known: str) -> str:
    """What `text` adds to `known`: a connection failure's cause, named both by the transport
    and by the exception, is told once (every log line and /status carry it)."""
    if text in known:
        return ""
    return text.split(known, 1)[1].strip() if known and known in text else text


def describe(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups for the real cause."""
    exc = cause(exc)
    return f"{type(exc).__name__}: {exc}"[:300]


async def within(request: Callable[[], Awaitable[T]], timeout: float,
                 error: Callable[[str], Exception], *, late: str, refused: str,
                 failed: str) -> T:
    """One request to a server (prompts/get, resources/read) within `timeout`, each failure
    raised as `error(sentence)`: `late` when it ran out, `refused` + the server's message for
    a JSON-RPC error, `failed` + the cause for anything else (also logged)."""
    import logging

    import anyio
    from mcp.shared.exceptions import MCPError

    from gantry.clip import clip

    try:
        with anyio.fail_after(timeout):
            return await request()
    except TimeoutError:
        raise error(f"{late} within {timeout:g} s") from None
    except MCPError as exc:
        raise error(f"{refused}: {clip(exc.message, 300)}") from None
    except Exception as exc:
        logging.getLogger("gantry.mcp").warning(failed, extra={"error": describe(exc)[:300]})
        raise error(f"{failed}: {describe(exc)[:300]}") from None
