"""A loopback fake of the Telegram Bot API, for driving gantry's Telegram channel for real.

Real sockets on 127.0.0.1 (ephemeral port) so tests exercise aiogram's real HTTP session,
its request encoding and its error mapping. Paths are `/bot<token>/<method>`, as aiogram
builds them from `TelegramAPIServer.from_base(base_url)`.

Implemented: getMe, deleteWebhook, getUpdates (offset confirmation, long-poll `timeout`,
`limit`, `allowed_updates`, 409 when a newer poll preempts an older one), sendMessage,
editMessageText, sendChatAction, setMyCommands, sendPhoto/sendDocument/sendVoice (uploads
recorded with their bytes and part type), setMessageReaction (checked against the emoji bots
may set, recorded per message), users' reactions as message_reaction updates
(`push_reaction`), getFile and file downloads
(tests/fakes/telegram_files.py); inline keyboards on sendMessage
(`reply_markup`, checked like Telegram: button text, 1-64 bytes of callback_data), button
presses as callback_query updates (`press`), answerCallbackQuery (unknown or twice-answered
query ids are refused) and editMessageReplyMarkup. Anything else is a 404 in the Bot API
error shape. sendMessage/editMessageText validate like Telegram does where it matters to
gantry: empty text, > 4096 UTF-16 units, entities out of range, "message is not modified".

Request bodies: aiogram 3.x's AiohttpSession posts `FormData` — urlencoded when there are
no files, multipart otherwise — with every non-string value JSON-encoded (`chat_id=42`,
`entities=[{...}]`, `reply_parameters={...}`). JSON bodies and query strings are accepted
too. Values are JSON-decoded unless the field is a known string field (`text`, ...).

Async tests::

    async with FakeTelegram() as tg:
        bot = Bot(TOKEN, session=AiohttpSession(api=TelegramAPIServer.from_base(tg.base_url)))
        tg.push_text(user_id=7, text="hi")
        tg.fail("sendMessage", "retry_after", retry_after=1)

Subprocess tests::

    tg = FakeTelegram()
    base_url = tg.start_in_thread()
    ...
    tg.wait_sent_sync(chat_id=7)
    tg.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import ssl
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from aiohttp import web

from tests.fakes._loopback import LoopbackServer
from tests.fakes.telegram_files import FileServing

__all__ = ["BotMessage", "Call", "FakeTelegram", "Fault", "FaultKind"]

T = TypeVar("T")

FaultKind = Literal[
    "retry_after", "conflict", "server_error", "not_modified", "cant_parse", "dropped", "error",
    "blocked", "chat_not_found", "migrated", "html_502", "slow", "raw",
]

NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)
CANT_PARSE = (
    "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 0"
)
CONFLICT_POLL = (
    "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running"
)
BLOCKED = "Forbidden: bot was blocked by the user"
CHAT_NOT_FOUND = "Bad Request: chat not found"
MIGRATED = "Bad Request: group chat was upgraded to a supergroup chat"
HTML_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)
CONFLICT_WEBHOOK = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)

# Fields whose form values are plain strings; everything else aiogram JSON-encodes.
_STRING_FIELDS = frozenset(
    {
        "text",
        "caption",
        "parse_mode",
        "action",
        "language_code",
        "description",
        "short_description",
        "name",
        "title",
        "url",
        "query",
        "emoji",
        "inline_message_id",
        "business_connection_id",
        "message_effect_id",
        "secret_token",
    }
)
_MAX_TEXT = 4096


@dataclass(frozen=True)
class Fault:
    """An injected failure answering one call instead of the real handler."""

    kind: FaultKind
    retry_after: int = 1
    status: int = 400
    description: str = ""
    delay: float = 0.0
    migrate_to: int = 0


@dataclass
class Call:
    """One API request as received. `status` is filled in when it is answered."""

    method: str
    params: dict[str, Any]
    at: float  # time.monotonic() on arrival
    token: str = ""
    fault: FaultKind | None = None
    status: int | None = None


@dataclass
class BotMessage:
    """A message the bot sent; `text`/`entities` follow later edits, `history` keeps all."""

    chat_id: int | str
    message_id: int
    text: str
    entities: list[dict[str, Any]]
    history: list[str] = field(default_factory=list)


@dataclass
class SentFile:
    """A file the bot uploaded with sendPhoto or sendDocument: the exact bytes received."""

    method: str  # "sendPhoto" | "sendDocument" | "sendVoice"
    chat_id: int | str
    message_id: int
    filename: str
    data: bytes
    caption: str = ""
    content_type: str = ""  # the multipart part's Content-Type


@dataclass(eq=False)
class _Poll:
    event: asyncio.Event
    preempted: bool = False


class _Reply(Exception):
    """Raised inside a method handler to answer with a Bot API error."""

    def __init__(self, status: int, description: str, parameters: dict[str, Any] | None = None):
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters


def _utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def _coerce(key: str, value: str) -> Any:
    if key in _STRING_FIELDS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _same_chat(a: Any, b: Any) -> bool:
    return str(a) == str(b)


def _update_type(update: dict[str, Any]) -> str:
    return next((k for k in update if k != "update_id"), "")


class FakeTelegram(FileServing, LoopbackServer):
    """A Bot API server on 127.0.0.1 (see the module docstring).

    `base_url` is `http://127.0.0.1:<port>`: pass it to `TelegramAPIServer.from_base`.
    """

    name = "fake Telegram server"

    def __init__(
        self,
        *,
        token: str | None = None,
        bot_id: int = 7_000_000_001,
        bot_username: str = "gantry_test_bot",
        webhook_active: bool = False,
        first_update_id: int = 100_000,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`token` set → other tokens get 401 Unauthorized, as from the real API."""
        super().__init__(ssl_context)
        self.token = token
        self.bot_user: dict[str, Any] = {
            "id": bot_id,
            "is_bot": True,
            "first_name": "Gantry Test",
            "username": bot_username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }
        self.webhook_active = webhook_active
        self.commands: list[dict[str, Any]] = []
        self._calls: list[Call] = []
        self._updates: deque[dict[str, Any]] = deque()
        self._next_update_id = itertools.count(first_update_id)
        self._last_issued = first_update_id - 1  # highest update id of the current sequence
        self._confirmed = 0
        self._allowed: list[str] | None = None
        self._message_ids: dict[str, itertools.count[int]] = {}
        self._sent: list[BotMessage] = []
        self._uploads: list[SentFile] = []  # sendPhoto / sendDocument uploads (media out)
        self._messages: dict[tuple[str, int], BotMessage] = {}
        self._faults: dict[str, deque[Fault]] = {}
        self._lock = threading.Lock()
        self._polls: set[_Poll] = set()
        self.keyboards: dict[tuple[str, int], list[list[dict[str, Any]]]] = {}  # live ones
        self.queries: dict[str, str | None] = {}  # callback_query id → its answer's text
        self._open_queries: set[str] = set()
        self._query_ids = itertools.count(1)
        self.reactions: dict[tuple[str, int], list[list[str]]] = {}  # message → each one set
        self.on_text: Callable[[str], None] | None = None
        """Called with each text sent or edited in (a soak's turns end without polling)."""

    # ------------------------------------------------------------------ scripting

    def message(self, user_id: int, chat_id: int | None = None, **fields: Any) -> dict[str, Any]:
        """A Message object from `user_id` in `chat_id` (default: their private chat)."""
        chat = user_id if chat_id is None else chat_id
        chat_obj: dict[str, Any] = (
            {"id": chat, "type": "private", "first_name": f"user{user_id}"}
            if chat > 0
            else {"id": chat, "type": "supergroup", "title": f"group{chat}"}
        )
        msg: dict[str, Any] = {
            "message_id": self._new_message_id(chat),
            "date": int(time.time()),
            "chat": chat_obj,
            "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
        }
        msg.update(fields)
        return msg

    def push_text(self, user_id: int, text: str, chat_id: int | None = None) -> dict[str, Any]:
        """Enqueue a text message update; commands get a bot_command entity like Telegram's."""
        fields: dict[str, Any] = {"text": text}
        if text.startswith("/"):
            command = text.split(maxsplit=1)[0]
            fields["entities"] = [{"type": "bot_command", "offset": 0, "length": len(command)}]
        return self.push_update({"message": self.message(user_id, chat_id, **fields)})

    def push_update(self, update: dict[str, Any]) -> dict[str, Any]:
        """Enqueue a raw update (photo, sticker, edited_message, ...); assigns update_id."""
        with self._lock:
            full = {"update_id": next(self._next_update_id), **update}
            if "update_id" in update:
                full["update_id"] = update["update_id"]
            self._last_issued = max(self._last_issued, full["update_id"])
            self._updates.append(full)
        self._wake()
        return full

    def restart_update_ids(self, first: int) -> None:
        """Start update ids again from a lower `first`, as Telegram may after a week
        without updates. An offset past the new sequence confirms nothing: getUpdates
        then answers as if no offset had been given (the same updates come back)."""
        with self._lock:
            self._next_update_id = itertools.count(first)
            self._last_issued = first - 1

    def fail(
        self,
        method: str,
        kind: FaultKind,
        *,
        times: int = 1,
        retry_after: int = 1,
        status: int = 400,
        description: str = "",
        delay: float = 0.0,
        migrate_to: int = 0,
    ) -> None:
        """Answer the next `times` calls of `method` with a fault instead of handling them.

        kinds: retry_after (429 + parameters.retry_after), conflict (409), server_error
        (500), not_modified / cant_parse (400), dropped (socket closed, no response),
        error (any `status` + `description`), blocked (403 "bot was blocked by the user"),
        chat_not_found (400), migrated (400 + parameters.migrate_to_chat_id = `migrate_to`),
        html_502 (a 502 whose body is nginx's HTML page, not JSON), slow (the call succeeds
        normally, but only after `delay`). raw (HTTP `status` with `description` verbatim as an
        application/json body: a proxy or self-hosted server answering in its own shape).
        `delay` seconds pass before the fault is delivered.
        """
        fault = Fault(kind, retry_after, status, description, delay, migrate_to)
        with self._lock:
            self._faults.setdefault(method.lower(), deque()).extend([fault] * times)

    # ------------------------------------------------------------------ inspection

    def calls(self, method: str | None = None) -> list[Call]:
        """Recorded calls, optionally of one method (case-insensitive), in arrival order."""
        with self._lock:
            if method is None:
                return list(self._calls)
            return [c for c in self._calls if c.method.lower() == method.lower()]

    def sent(self, chat_id: int | str | None = None) -> list[BotMessage]:
        """Messages sent by sendMessage (current state after edits), in send order."""
        with self._lock:
            return [m for m in self._sent if chat_id is None or _same_chat(m.chat_id, chat_id)]

    def sent_texts(self, chat_id: int | str | None = None) -> list[str]:
        """Texts as originally passed to successful sendMessage calls."""
        return [m.history[0] for m in self.sent(chat_id)]

    def current_texts(self, chat_id: int | str | None = None) -> list[str]:
        """Texts of the bot's messages as they read now, after editMessageText."""
        return [m.text for m in self.sent(chat_id)]

    def forget(self) -> None:
        """Drop the record of calls, sent messages, uploads and files served (a soak of
        thousands of turns keeps the fake flat); pending updates and ids are kept."""
        with self._lock:
            self._calls.clear()
            self._sent.clear()
            self._messages.clear()
            self._uploads.clear()
            self.files.clear()
            self.downloads.clear()

    @property
    def pending_updates(self) -> int:
        """Updates not yet confirmed by a getUpdates offset."""
        with self._lock:
            return len(self._updates)

    @property
    def confirmed_offset(self) -> int:
        """The highest offset a getUpdates call has passed (0 before any)."""
        with self._lock:
            return self._confirmed

    # ------------------------------------------------------------------ waiting

    @staticmethod
    def _poll(predicate: Callable[[], T], deadline: float, timeout: float, what: str) -> T | None:
        """One look: the predicate's truthy result, None to wait more, or the timeout error."""
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"fake Telegram: timed out after {timeout}s waiting for {what}")
        return None

    async def wait_for(
        self, predicate: Callable[[], T], timeout: float = 5.0, what: str = "condition"
    ) -> T:
        """Poll `predicate` until it returns something truthy; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        while (result := self._poll(predicate, deadline, timeout, what)) is None:
            await asyncio.sleep(0.01)
        return result

    def wait_for_sync(
        self, predicate: Callable[[], T], timeout: float = 5.0, what: str = "condition"
    ) -> T:
        """Blocking twin of wait_for, for tests that run gantry as a subprocess."""
        deadline = time.monotonic() + timeout
        while (result := self._poll(predicate, deadline, timeout, what)) is None:
            time.sleep(0.01)
        return result

    def _calls_at_least(self, method: str, count: int) -> Callable[[], list[Call]]:
        def check() -> list[Call]:
            found = self.calls(method)
            return found if len(found) >= count else []

        return check

    def _sent_at_least(self, chat_id: int | str, count: int) -> Callable[[], list[str]]:
        def check() -> list[str]:
            found = self.sent_texts(chat_id)
            return found if len(found) >= count else []

        return check

    async def wait_calls(self, method: str, count: int = 1, timeout: float = 5.0) -> list[Call]:
        return await self.wait_for(
            self._calls_at_least(method, count), timeout, f"{count} {method} call(s)"
        )

    def wait_calls_sync(self, method: str, count: int = 1, timeout: float = 5.0) -> list[Call]:
        return self.wait_for_sync(
            self._calls_at_least(method, count), timeout, f"{count} {method} call(s)"
        )

    async def wait_sent(
        self, chat_id: int | str, count: int = 1, timeout: float = 5.0
    ) -> list[str]:
        return await self.wait_for(
            self._sent_at_least(chat_id, count), timeout, f"{count} message(s) to {chat_id}"
        )

    def wait_sent_sync(self, chat_id: int | str, count: int = 1, timeout: float = 5.0) -> list[str]:
        return self.wait_for_sync(
            self._sent_at_least(chat_id, count), timeout, f"{count} message(s) to {chat_id}"
        )

    # ------------------------------------------------------------------ lifecycle

    # ------------------------------------------------------------------ serving

    def _routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        self._file_routes(app)  # getFile's downloads (tests/fakes/telegram_files.py)

    def _wake(self) -> None:
        """Tell waiting long polls to look again; safe from any thread."""
        loop = self._server_loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake_polls)

    def _wake_polls(self) -> None:
        for poll in self._polls:
            poll.event.set()

    def _new_message_id(self, chat_id: int | str) -> int:
        with self._lock:
            counter = self._message_ids.setdefault(str(chat_id), itertools.count(1))
            return next(counter)

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = {k: _coerce(k, v) for k, v in request.query.items()}
        if request.content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                params.update(body)
        elif request.can_read_body:
            form = await request.post()
            for key, value in form.items():
                if isinstance(value, str):
                    params[key] = _coerce(key, value)
                elif isinstance(value, web.FileField):
                    data = value.file.read()
                    params[key] = {"filename": value.filename, "size": len(data), "data": data,
                                   "content_type": value.content_type}
                else:
                    params[key] = {"size": len(value)}
        return params

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        token, method = request.match_info["token"], request.match_info["method"]
        params = await self._params(request)
        call = Call(method=method, params=params, at=time.monotonic(), token=token)
        with self._lock:
            self._calls.append(call)
            queue = self._faults.get(method.lower())
            fault = queue.popleft() if queue else None
        if self.token is not None and token != self.token:
            return _answer_error(call, 401, "Unauthorized")
        if fault is not None:
            call.fault = fault.kind
            if fault.delay and fault.kind != "slow":
                await asyncio.sleep(fault.delay)
            if fault.kind != "slow":
                return _fault_response(request, call, fault)
        handler = _METHODS.get(method.lower())
        if handler is None:
            return _answer_error(call, 404, "Not Found")
        try:
            result = await handler(self, params)
        except _Reply as err:
            return _answer_error(call, err.status, err.description, err.parameters)
        if fault is not None and fault.kind == "slow":
            # Like Telegram: the work is done (the message is sent) even if the client
            # stops waiting for the answer.
            await asyncio.sleep(fault.delay)
        call.status = 200
        return web.json_response({"ok": True, "result": result})

    # ------------------------------------------------------------------ methods

    async def _get_me(self, params: dict[str, Any]) -> Any:
        return self.bot_user

    async def _delete_webhook(self, params: dict[str, Any]) -> Any:
        self.webhook_active = False
        if params.get("drop_pending_updates"):
            with self._lock:
                self._updates.clear()
        return True

    async def _get_webhook_info(self, params: dict[str, Any]) -> Any:
        url = "https://hooks.example.invalid/telegram" if self.webhook_active else ""
        return {"url": url, "has_custom_certificate": False, "pending_update_count": 0}

    async def _set_my_commands(self, params: dict[str, Any]) -> Any:
        commands = params.get("commands")
        if not isinstance(commands, list):
            raise _Reply(400, "Bad Request: commands must be an array")
        self.commands = commands
        return True

    async def _send_chat_action(self, params: dict[str, Any]) -> Any:
        if "chat_id" not in params or not params.get("action"):
            raise _Reply(400, "Bad Request: chat_id and action are required")
        return True

    def _ready(self, offset: int, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            allowed = self._allowed
            out = [
                u
                for u in self._updates
                if u["update_id"] >= offset and (not allowed or _update_type(u) in allowed)
            ]
        return out[:limit]

    async def _get_updates(self, params: dict[str, Any]) -> Any:
        if self.webhook_active:
            raise _Reply(409, CONFLICT_WEBHOOK)
        offset = int(params.get("offset") or 0)
        with self._lock:
            if offset > self._last_issued + 1:  # beyond the current sequence: ignored
                offset = 0
        limit = min(100, max(1, int(params.get("limit") or 100)))
        timeout = max(0.0, float(params.get("timeout") or 0))
        with self._lock:
            if isinstance(params.get("allowed_updates"), list):
                self._allowed = list(params["allowed_updates"])
            if offset > 0:
                self._confirmed = max(self._confirmed, offset)
                while self._updates and self._updates[0]["update_id"] < offset:
                    self._updates.popleft()
            elif offset < 0:
                while len(self._updates) > -offset:
                    self._updates.popleft()
        for older in self._polls:
            older.preempted = True
            older.event.set()
        poll = _Poll(asyncio.Event())
        self._polls.add(poll)
        deadline = time.monotonic() + timeout
        try:
            while True:
                ready = self._ready(offset, limit)
                remaining = deadline - time.monotonic()
                if ready or remaining <= 0:
                    return ready
                poll.event.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(poll.event.wait(), remaining)
                if poll.preempted:
                    raise _Reply(409, CONFLICT_POLL)
        finally:
            self._polls.discard(poll)

    def _check_text(self, params: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _Reply(400, "Bad Request: message text is empty")
        size = _utf16_len(text)
        if size > _MAX_TEXT:
            raise _Reply(400, "Bad Request: message is too long")
        entities = params.get("entities") or []
        if not isinstance(entities, list):
            raise _Reply(400, "Bad Request: can't parse entities JSON object")
        for e in entities:
            ok = (
                isinstance(e, dict)
                and isinstance(e.get("type"), str)
                and isinstance(e.get("offset"), int)
                and isinstance(e.get("length"), int)
                and e["offset"] >= 0
                and e["length"] > 0
                and e["offset"] + e["length"] <= size
            )
            if not ok:
                raise _Reply(400, f"Bad Request: can't parse entities: invalid entity {e!r}")
        return text, entities

    def _message_result(self, msg: BotMessage, **extra: Any) -> dict[str, Any]:
        chat = msg.chat_id
        chat_obj: dict[str, Any] = (
            {"id": chat, "type": "private", "first_name": f"user{chat}"}
            if isinstance(chat, int) and chat > 0
            else {"id": chat, "type": "supergroup", "title": f"group{chat}"}
        )
        out: dict[str, Any] = {
            "message_id": msg.message_id,
            "date": int(time.time()),
            "chat": chat_obj,
            "from": self.bot_user,
            "text": msg.text,
            **extra,
        }
        if msg.entities:
            out["entities"] = msg.entities
        return out

    async def _send_message(self, params: dict[str, Any]) -> Any:
        chat_id = params.get("chat_id")
        if chat_id is None or chat_id == "":
            raise _Reply(400, "Bad Request: chat not found")
        text, entities = self._check_text(params)
        msg = BotMessage(chat_id, self._new_message_id(chat_id), text, entities, [text])
        with self._lock:
            self._sent.append(msg)
            self._messages[(str(chat_id), msg.message_id)] = msg
        if self.on_text is not None:
            self.on_text(text)
        return self._message_result(msg)

    async def _edit_message_text(self, params: dict[str, Any]) -> Any:
        key = (str(params.get("chat_id")), int(params.get("message_id") or 0))
        with self._lock:
            msg = self._messages.get(key)
        if msg is None:
            raise _Reply(400, "Bad Request: message to edit not found")
        text, entities = self._check_text(params)
        if text == msg.text and entities == msg.entities:
            raise _Reply(400, NOT_MODIFIED)
        with self._lock:
            msg.text, msg.entities = text, entities
            msg.history.append(text)
        if self.on_text is not None:
            self.on_text(text)
        return self._message_result(msg, edit_date=int(time.time()))

    # ------------------------------------------------------------------ media out

    fetchable = "https://images.example/"
    """URLs a sendPhoto by URL succeeds for (Telegram fetched them); other https URLs get
    Telegram's 400 for a page that is no image."""

    def clear_faults(self, method: str) -> None:
        """Drop the faults still queued for `method` (Telegram is back)."""
        with self._lock:
            self._faults.pop(method.lower(), None)

    def uploads(self, chat_id: int | str | None = None) -> list[SentFile]:
        """Uploaded photos and documents, in arrival order (optionally of one chat)."""
        with self._lock:
            return [f for f in self._uploads if chat_id is None or _same_chat(f.chat_id, chat_id)]

    async def wait_uploads(self, chat_id: int | str, count: int = 1,
                         timeout: float = 5.0) -> list[SentFile]:
        def check() -> list[SentFile]:
            found = self.uploads(chat_id)
            return found if len(found) >= count else []

        return await self.wait_for(check, timeout, f"{count} file(s) to {chat_id}")

    def wait_uploads_sync(self, chat_id: int | str, count: int = 1,
                        timeout: float = 5.0) -> list[SentFile]:
        def check() -> list[SentFile]:
            found = self.uploads(chat_id)
            return found if len(found) >= count else []

        return self.wait_for_sync(check, timeout, f"{count} file(s) to {chat_id}")

    async def _send_file(self, params: dict[str, Any], method: str, field_name: str) -> Any:
        """sendPhoto / sendDocument as multipart: the file is the field itself or, as aiogram
        sends it, `attach://<name>` naming another part. A file id or URL string is refused
        (gantry always uploads)."""
        chat_id = params.get("chat_id")
        if chat_id is None or chat_id == "":
            raise _Reply(400, "Bad Request: chat not found")
        value = params.get(field_name)
        if isinstance(value, str) and value.startswith("attach://"):
            value = params.get(value.removeprefix("attach://"))
        elif isinstance(value, str) and value.startswith(self.fetchable):
            value = {"filename": value, "data": b"(fetched by Telegram)"}
        elif isinstance(value, str) and value.startswith("https://"):
            raise _Reply(400, "Bad Request: wrong type of the web page content")
        if not isinstance(value, dict) or "data" not in value:
            raise _Reply(400, f"Bad Request: there is no {field_name} in the request")
        if not value["data"]:
            raise _Reply(400, "Bad Request: file must be non-empty")
        caption = str(params.get("caption") or "")
        if len(caption) > 1024:
            raise _Reply(400, "Bad Request: message caption is too long")
        sent = SentFile(method, chat_id, self._new_message_id(chat_id),
                        str(value.get("filename") or ""), value["data"], caption,
                        str(value.get("content_type") or ""))
        with self._lock:
            self._uploads.append(sent)
        result = self._message_result(BotMessage(chat_id, sent.message_id, "", []))
        del result["text"]
        if caption:
            result["caption"] = caption
        size = len(sent.data)
        if method == "sendPhoto":
            result["photo"] = [{"file_id": f"photo-{sent.message_id}", "file_unique_id":
                                f"u{sent.message_id}", "width": 1, "height": 1,
                                "file_size": size}]
        else:
            result["document"] = {"file_id": f"doc-{sent.message_id}", "file_unique_id":
                                  f"u{sent.message_id}", "file_name": sent.filename,
                                  "file_size": size}
        return result

    async def _send_voice(self, params: dict[str, Any]) -> Any:
        """sendVoice: like Telegram, a voice note only from an OGG/Opus upload (other audio
        would be shown as a file); a caption of at most 1024 characters."""
        value = params.get("voice")
        if isinstance(value, str) and value.startswith("attach://"):
            value = params.get(value.removeprefix("attach://"))
        if isinstance(value, dict) and not bytes(value.get("data") or b"").startswith(b"OggS"):
            raise _Reply(400, "Bad Request: wrong file type of the voice")
        result = await self._send_file(params, "sendVoice", "voice")
        result.pop("document", None)
        result["voice"] = {"file_id": f"voice-{result['message_id']}",
                           "file_unique_id": f"u{result['message_id']}",
                           "duration": int(params.get("duration") or 0),
                           "mime_type": "audio/ogg"}
        return result

    # Some of the reactions Telegram lets a bot set (Bot API, ReactionTypeEmoji); others,
    # such as 😀 or ✅, it refuses with REACTION_INVALID.
    BOT_REACTIONS = frozenset(["👍", "👎", "❤", "🔥", "🥰", "👏", "😁", "🤔", "🤯", "😱", "🎉",
                               "🤩", "🙏", "👌", "😍", "💯", "🤣", "⚡", "🏆", "💔", "🤨", "😐",
                               "😴", "😭", "🤓", "👻", "👀", "🙈", "😇", "🤝", "✍", "🤗", "🫡",
                               "🆒", "😎", "😡"])

    async def _set_message_reaction(self, params: dict[str, Any]) -> Any:
        chat, message_id = params.get("chat_id"), int(params.get("message_id") or 0)
        if chat is None or not message_id:
            raise _Reply(400, "Bad Request: message to react not found")
        reaction = params.get("reaction") or []
        if not isinstance(reaction, list):
            raise _Reply(400, "Bad Request: can't parse reaction types JSON object")
        emojis = []
        for r in reaction:
            if not isinstance(r, dict) or r.get("type") != "emoji" or \
                    r.get("emoji") not in self.BOT_REACTIONS:
                raise _Reply(400, "Bad Request: REACTION_INVALID")
            emojis.append(r["emoji"])
        with self._lock:
            self.reactions.setdefault((str(chat), message_id), []).append(emojis)
        return True

    def reactions_on(self, chat_id: int | str, message_id: int) -> list[list[str]]:
        """Every reaction set the bot put on a message, in order ([] = cleared)."""
        with self._lock:
            return list(self.reactions.get((str(chat_id), message_id), []))

    def push_reaction(self, user_id: int, chat_id: int, message_id: int, new: list[str],
                      old: list[str] | None = None) -> dict[str, Any]:
        """A user's reaction change on a message: a message_reaction update (delivered only
        when getUpdates' allowed_updates names it, as Telegram does)."""
        chat = ({"id": chat_id, "type": "private", "first_name": f"user{user_id}"}
                if chat_id > 0 else {"id": chat_id, "type": "supergroup",
                                     "title": f"group{chat_id}"})
        return self.push_update({"message_reaction": {
            "chat": chat, "message_id": message_id, "date": int(time.time()),
            "user": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
            "old_reaction": [{"type": "emoji", "emoji": e} for e in old or []],
            "new_reaction": [{"type": "emoji", "emoji": e} for e in new]}})

    async def _send_photo(self, params: dict[str, Any]) -> Any:
        return await self._send_file(params, "sendPhoto", "photo")

    async def _send_document(self, params: dict[str, Any]) -> Any:
        return await self._send_file(params, "sendDocument", "document")


    # ------------------------------------------------------------------ inline keyboards

    def buttons(self, chat_id: int | str) -> list[tuple[int, list[str]]]:
        """(message id, button texts) of the chat's messages whose keyboards are still live."""
        with self._lock:
            return [(mid, [b["text"] for row in rows for b in row])
                    for (chat, mid), rows in self.keyboards.items() if chat == str(chat_id)]

    def press(self, user_id: int, chat_id: int, label: str) -> dict[str, Any]:
        """Press the button `label` on the chat's latest live keyboard that has it: a
        callback_query update, as Telegram sends for a button with callback_data."""
        with self._lock:
            found = [(mid, b) for (chat, mid), rows in self.keyboards.items()
                     if chat == str(chat_id) for row in rows for b in row if b["text"] == label]
        if not found:
            raise AssertionError(f"fake Telegram: no live button {label!r} in chat {chat_id}")
        mid, button = found[-1]
        return self.press_data(user_id, chat_id, mid, button["callback_data"])

    def press_data(self, user_id: int, chat_id: int, message_id: int,
                   data: str) -> dict[str, Any]:
        """A callback_query for any callback_data on any message (stale buttons too)."""
        with self._lock:
            msg = self._messages.get((str(chat_id), message_id))
            query_id = f"q{next(self._query_ids)}"
            self._open_queries.add(query_id)
        assert msg is not None, f"fake Telegram: no message {message_id} in chat {chat_id}"
        query = {"id": query_id, "chat_instance": f"ci{chat_id}", "data": data,
                 "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
                 "message": self._message_result(msg)}
        return self.push_update({"callback_query": query})

    def _keyboard(self, params: dict[str, Any]) -> list[list[dict[str, Any]]] | None:
        markup = params.get("reply_markup")
        if markup is None:
            return None
        rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
            raise _Reply(400, "Bad Request: can't parse reply keyboard markup JSON object")
        for row in rows:
            for b in row:
                if not isinstance(b, dict) or not str(b.get("text") or "").strip():
                    raise _Reply(400, "Bad Request: text buttons are unallowed in the inline "
                                 "keyboard")
                data = b.get("callback_data")
                if data is not None and not 1 <= len(str(data).encode()) <= 64:
                    raise _Reply(400, "Bad Request: BUTTON_DATA_INVALID")
        return rows

    async def _send_message_keyboard(self, params: dict[str, Any]) -> Any:
        rows = self._keyboard(params)
        result = await self._send_message(params)
        if rows:
            with self._lock:
                self.keyboards[(str(params.get("chat_id")), result["message_id"])] = rows
        return result

    async def _answer_callback_query(self, params: dict[str, Any]) -> Any:
        query_id = str(params.get("callback_query_id") or "")
        with self._lock:
            if query_id not in self._open_queries:
                raise _Reply(400, "Bad Request: query is too old and response timeout "
                             "expired or query ID is invalid")
            self._open_queries.discard(query_id)
            self.queries[query_id] = params.get("text")
        return True

    async def _edit_message_reply_markup(self, params: dict[str, Any]) -> Any:
        key = (str(params.get("chat_id")), int(params.get("message_id") or 0))
        rows = self._keyboard(params)
        with self._lock:
            msg = self._messages.get(key)
            if msg is None:
                raise _Reply(400, "Bad Request: message to edit not found")
            if not rows and key not in self.keyboards:
                raise _Reply(400, NOT_MODIFIED)
            if rows:
                self.keyboards[key] = rows
            else:
                self.keyboards.pop(key, None)
        return self._message_result(msg, edit_date=int(time.time()))


_Handler = Callable[[FakeTelegram, dict[str, Any]], Awaitable[Any]]
_METHODS: dict[str, _Handler] = {
    "getme": FakeTelegram._get_me,
    "deletewebhook": FakeTelegram._delete_webhook,
    "getwebhookinfo": FakeTelegram._get_webhook_info,
    "getupdates": FakeTelegram._get_updates,
    "sendmessage": FakeTelegram._send_message,
    "editmessagetext": FakeTelegram._edit_message_text,
    "sendchataction": FakeTelegram._send_chat_action,
    "setmycommands": FakeTelegram._set_my_commands,
    "sendphoto": FakeTelegram._send_photo,
    "senddocument": FakeTelegram._send_document,
    "getfile": FakeTelegram._get_file,
    "sendvoice": FakeTelegram._send_voice,
    "setmessagereaction": FakeTelegram._set_message_reaction,
}
_METHODS.update({  # inline keyboards and their callback queries (elicitation)
    "sendmessage": FakeTelegram._send_message_keyboard,
    "answercallbackquery": FakeTelegram._answer_callback_query,
    "editmessagereplymarkup": FakeTelegram._edit_message_reply_markup,
})


def _answer_error(
    call: Call, status: int, description: str, parameters: dict[str, Any] | None = None
) -> web.Response:
    call.status = status
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=status)


def _fault_response(request: web.Request, call: Call, fault: Fault) -> web.StreamResponse:
    if fault.kind == "retry_after":
        return _answer_error(
            call,
            429,
            f"Too Many Requests: retry after {fault.retry_after}",
            {"retry_after": fault.retry_after},
        )
    if fault.kind == "conflict":
        return _answer_error(call, 409, fault.description or CONFLICT_POLL)
    if fault.kind == "server_error":
        return _answer_error(call, 500, fault.description or "Internal Server Error")
    if fault.kind == "not_modified":
        return _answer_error(call, 400, NOT_MODIFIED)
    if fault.kind == "cant_parse":
        return _answer_error(call, 400, CANT_PARSE)
    if fault.kind == "blocked":
        return _answer_error(call, 403, BLOCKED)
    if fault.kind == "chat_not_found":
        return _answer_error(call, 400, CHAT_NOT_FOUND)
    if fault.kind == "migrated":
        return _answer_error(call, 400, MIGRATED, {"migrate_to_chat_id": fault.migrate_to})
    if fault.kind == "html_502":
        call.status = 502
        return web.Response(status=502, text=HTML_502, content_type="text/html")
    if fault.kind == "raw":
        call.status = fault.status
        return web.Response(status=fault.status, text=fault.description,
                            content_type="application/json")
    if fault.kind == "dropped":
        call.status = 0
        if request.transport is not None:
            request.transport.abort()
        return web.Response()
    return _answer_error(call, fault.status, fault.description or "Bad Request")
