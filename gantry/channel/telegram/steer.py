"""Which of a chat's waiting messages join its running turn (FOLLOWUPS=steer, gantry/steer.py).

Only the turn's own author's plain text, in arrival order: in a group another member's
message is left for a turn of its own; a command, a file, an album part or an already
answered message of the author's ends the run, so it and what follows keep their order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial

import anyio.lowlevel

from gantry.channel.base import is_command
from gantry.channel.telegram.store import Pending, TelegramStore
from gantry.steer import MAX_PER_ROUND, FollowUp, Steer

log = logging.getLogger("gantry.channel.telegram")


def foldable(lead: Pending, waiting: Sequence[Pending]) -> list[Pending]:
    """The updates of `waiting` (the chat's, after `lead`, oldest first) that join `lead`'s
    turn (pure)."""
    out: list[Pending] = []
    for row in waiting:
        if row.user_id != lead.user_id:
            continue  # another member of a group: its own turn, after this one
        if (row.reply is not None or row.media != "[]" or row.media_group is not None
                or not row.text.strip() or is_command(row.text)):
            break
        out.append(row)
    return out


def steer_for(store: TelegramStore, lead: Pending) -> Steer:
    """The Steer of `lead`'s turn: its follow-ups, each consumed by ending its row folded."""

    def consume(row: Pending) -> None:
        if store.fold(row.update_id):
            log.info("message folded into the running turn",
                     extra={"update_id": row.update_id, "into": lead.update_id,
                            "chat_id": row.chat_id})

    async def take() -> list[FollowUp]:
        await anyio.lowlevel.checkpoint()  # a stopped turn ends here, having taken nothing
        rows = foldable(lead, store.waiting(lead, 4 * MAX_PER_ROUND))[:MAX_PER_ROUND]
        return [FollowUp(r.text, consume=partial(consume, r)) for r in rows]

    return take
