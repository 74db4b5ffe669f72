"""Side effects whose failure is logged, never raised: background tasks and notifications.

``asyncio`` keeps only a weak reference to a task, so a task nobody holds can vanish mid-run,
and an exception in a task nobody awaits surfaces only as "Task exception was never retrieved"
at garbage collection, if at all. :class:`BackgroundTasks` is the one place that keeps the
strong reference, drops it when the task is done, and logs what went wrong.
:func:`safe_call` is the awaited kind: a chat notification that must not break the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_notify_log = logging.getLogger("plangate.notify")


async def safe_call(what: str, call: Awaitable[None]) -> None:
    """Await a notification (a channel method); log and swallow its failure so the caller
    goes on.

    The chat is a side effect of the log, not its authority: a chat outage must not turn
    a committed step into a failed one. Cancellation is not swallowed.
    """
    try:
        await call
    except Exception as exc:  # worker boundary: a front-end failure never breaks a turn
        _notify_log.warning("plangate.notify.failed %s %s: %s", what, type(exc).__name__, exc)


class BackgroundTasks:
    """A set of fire-and-forget tasks with one error policy.

    A task that ends with an exception is logged on ``logger`` as ``<event> name=<name>
    <type>: <message>`` (at WARNING), unless the exception is one of ``expected`` (then it is
    dropped quietly: the caller said that failure is fine). A cancelled task is never logged.
    The set holds only the tasks still running; ``len()`` and truthiness read it.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        event: str = "background_failed",
        expected: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._log = logger
        self._event = f"{logger.name}.{event}"
        self._expected = expected
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(
        self,
        coro: Coroutine[Any, Any, T],
        *,
        name: str,
        expected: tuple[type[BaseException], ...] | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        """Run ``coro`` as a task kept until it finishes; ``name`` appears in the log line.

        ``expected`` replaces the set's own for this task. ``context``: the task's context
        variables (default: a copy of the caller's). The returned task may be awaited or
        cancelled; its failure is logged either way."""
        quiet = self._expected if expected is None else expected
        task = asyncio.get_running_loop().create_task(coro, name=name, context=context)
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._done(done, quiet))
        return task

    def _done(self, task: asyncio.Task[Any], quiet: tuple[type[BaseException], ...]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()  # retrieved here, so asyncio never reports it again
        if exc is None or isinstance(exc, quiet):
            return
        self._log.warning(
            "%s name=%s %s: %s", self._event, task.get_name(), type(exc).__name__, exc
        )

    def __len__(self) -> int:
        return len(self._tasks)

    def __bool__(self) -> bool:
        return bool(self._tasks)

    async def drain(self) -> None:
        """Wait until no task is running, including those spawned while waiting.

        Never raises a task's exception (that was logged). Not to be awaited from one of
        these tasks (it would wait for itself)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def cancel(self) -> None:
        """Ask every running task to stop (shutdown); :meth:`aclose` also waits for them."""
        for task in list(self._tasks):
            task.cancel()

    async def aclose(self) -> None:
        """Cancel every running task and wait until each has finished."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


__all__ = ["BackgroundTasks", "safe_call"]
