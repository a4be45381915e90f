"""Follow-ups that steer the running turn (FOLLOWUPS=steer; docs/telegram.md, "Follow-ups").

A channel hands a turn a `Steer` (Inbound.steer): what the same user sent since the turn
began. Between rounds, after a tool round's results and before the next model call, the
agent folds it in: each follow-up becomes a user message, recorded in the same transaction
as the channel's `consume` of it, so after a kill -9 a follow-up is either in the history
and consumed or neither (then it gets a turn of its own). What comes while the model writes
its final answer is not taken here: it stays queued and gets its own short turn after.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import msgspec

from gantry.model.messages import ImagePart, Message, UserMessage, user_content

log = logging.getLogger("gantry.steer")

MODES = ("steer", "queue")
MAX_PER_ROUND = 10  # follow-ups folded at one time; the rest wait for the next round
FOLLOWUP_MARK = "[the user sent this while you were working on your reply]\n"
"""Starts a folded follow-up's text: the model reads it as an addition to the request it is
working on, and a retried turn (after a restart) knows the message belongs to it."""


class FollowUp(msgspec.Struct, frozen=True):
    """One message to fold into the running turn. `consume` is the channel's record that it
    was folded: called inside the transaction that adds it to the history, it must only
    write, through the agent's connection (like Inbound.on_answer)."""

    text: str
    images: tuple[ImagePart, ...] = ()
    consume: Callable[[], None] | None = None


Steer = Callable[[], Awaitable[Sequence[FollowUp]]]
"""The follow-ups waiting to be folded now, oldest first ([] when there are none)."""


class _Sessions(Protocol):
    def append(self, session_id: str, messages: Sequence[Message]) -> None: ...

    def atomic(self) -> AbstractContextManager[object]: ...


def marked(text: str) -> str:
    return FOLLOWUP_MARK + text


def is_followup(m: Message) -> bool:
    """Whether a history message is a follow-up folded into the turn before it."""
    return isinstance(m, UserMessage) and m.text.startswith(FOLLOWUP_MARK)


async def fold(steer: Steer, sessions: _Sessions, session_id: str) -> list[UserMessage]:
    """Take the waiting follow-ups and record them as the turn's next user messages, each
    consumed in the same transaction; the messages added ([] if none were waiting)."""
    taken = list(await steer())[:MAX_PER_ROUND]
    if not taken:
        return []
    added = [UserMessage(user_content(marked(f.text), f.images)) for f in taken]
    with sessions.atomic():
        sessions.append(session_id, added)
        for f in taken:
            if f.consume is not None:
                f.consume()
    log.info("follow-up folded into the running turn",
             extra={"session": session_id, "count": len(added)})
    return added
