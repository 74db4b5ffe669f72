"""engine.tasks.BackgroundTasks: kept until done, failures logged, drained, cancelled."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from engine.tasks import BackgroundTasks

LOG = logging.getLogger("plangate.test_tasks")


async def _fail(message: str) -> None:
    await asyncio.sleep(0)
    raise ValueError(message)


async def test_an_exception_is_logged_with_the_task_name_not_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = BackgroundTasks(LOG, event="send_failed")
    seen: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, ctx: seen.append(ctx))
    try:
        with caplog.at_level(logging.WARNING, logger="plangate.test_tasks"):
            task = tasks.spawn(_fail("disk is full"), name="notice:s1")
            await tasks.drain()
            del task
            gc.collect()
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert [r.getMessage() for r in caplog.records] == [
        "plangate.test_tasks.send_failed name=notice:s1 ValueError: disk is full"
    ]
    assert seen == []  # retrieved: asyncio has nothing "never retrieved" to report


async def test_the_set_empties_and_drain_waits_for_late_spawns() -> None:
    tasks = BackgroundTasks(LOG)
    gate = asyncio.Event()
    done: list[str] = []

    async def second() -> None:
        done.append("second")

    async def first() -> None:
        await gate.wait()
        tasks.spawn(second(), name="second")  # spawned while drain() already waits
        done.append("first")

    tasks.spawn(first(), name="first")
    assert len(tasks) == 1 and tasks
    drained = asyncio.ensure_future(tasks.drain())
    await asyncio.sleep(0)
    assert not drained.done()
    gate.set()
    await asyncio.wait_for(drained, 5)
    assert done == ["first", "second"]
    assert len(tasks) == 0 and not tasks


async def test_cancel_stops_running_tasks_and_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = BackgroundTasks(LOG)
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    with caplog.at_level(logging.DEBUG, logger="plangate.test_tasks"):
        one = tasks.spawn(forever(), name="one")
        two = tasks.spawn(forever(), name="two")
        await asyncio.wait_for(started.wait(), 5)
        tasks.cancel()
        await asyncio.wait_for(asyncio.wait([one, two]), 5)
        assert one.cancelled() and two.cancelled()
        three = tasks.spawn(forever(), name="three")
        await asyncio.sleep(0)
        await asyncio.wait_for(tasks.aclose(), 5)
        assert three.cancelled()
    assert not tasks
    assert caplog.records == []


async def test_an_expected_exception_is_dropped_quietly(caplog: pytest.LogCaptureFixture) -> None:
    tasks = BackgroundTasks(LOG, expected=(ValueError,))
    with caplog.at_level(logging.DEBUG, logger="plangate.test_tasks"):
        tasks.spawn(_fail("expendable"), name="refusal")
        await asyncio.wait_for(tasks.drain(), 5)
    assert caplog.records == []


async def test_a_spawn_may_name_its_own_expected_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = BackgroundTasks(LOG)
    with caplog.at_level(logging.DEBUG, logger="plangate.test_tasks"):
        tasks.spawn(_fail("expendable"), name="refusal", expected=(ValueError,))
        tasks.spawn(_fail("a bug"), name="reply")
        await asyncio.wait_for(tasks.drain(), 5)
    assert [r.getMessage() for r in caplog.records] == [
        "plangate.test_tasks.background_failed name=reply ValueError: a bug"
    ]


async def test_the_returned_task_carries_the_result() -> None:
    tasks = BackgroundTasks(LOG)

    async def answer() -> int:
        return 42

    assert await tasks.spawn(answer(), name="answer") == 42
