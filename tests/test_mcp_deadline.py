"""The calls' deadlines share one timer per loop (gantry/mcp/deadline.py): each still ends
its own call when it is due, in order, whatever the order they were made in."""

from __future__ import annotations

import anyio

from gantry.mcp.deadline import Deadline, held


async def _run(timeout: float, ended: list[tuple[float, float]], start: float) -> None:
    with Deadline(timeout, 10 * timeout) as d:
        await anyio.sleep(5)
    assert d.scope.cancelled_caught and not d.capped
    ended.append((timeout, anyio.current_time() - start))


def test_deadlines_each_end_their_call_when_due() -> None:
    async def main() -> list[tuple[float, float]]:
        ended: list[tuple[float, float]] = []
        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for timeout in (0.3, 0.1, 0.2):  # a later call due first re-arms the timer
                tg.start_soon(_run, timeout, ended, start)
        return ended

    ended = anyio.run(main)
    assert [t for t, _ in ended] == [0.1, 0.2, 0.3]
    assert all(t - 0.01 <= took < t + 0.25 for t, took in ended)


def test_progress_and_holds_move_the_deadline() -> None:
    async def main() -> tuple[float, bool, float, bool]:
        start = anyio.current_time()
        with Deadline(0.2, 0.5) as d:  # progress every 0.1 s: cut at the cap, 0.5 s
            while True:
                await anyio.sleep(0.1)
                d.alive()
        capped = (anyio.current_time() - start, d.capped)
        start = anyio.current_time()
        with Deadline(0.2, 10) as d2:  # a question held for 0.3 s: its time does not count
            with held([d2]) as hold:
                await anyio.sleep(0.3)
                hold.answered = True
            await anyio.sleep(5)
        return (*capped, anyio.current_time() - start, d2.capped)

    capped_after, capped, held_after, held_capped = anyio.run(main)
    assert 0.49 <= capped_after < 0.8 and capped
    assert 0.49 <= held_after < 0.8 and not held_capped
