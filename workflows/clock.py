"""The wall-clock budget of a task: a durable timer around each active segment.

``max_seconds`` is enforced by the workflow, not checked after the fact: the
active part of a task runs under ``asyncio.wait_for`` with what is left, so when
the timer fires the running activity is cancelled (and waited for). Time spent
waiting on a person is outside any segment and costs nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, TypeVar

from temporalio import workflow

T = TypeVar("T")


class OutOfTime(Exception):
    """The wall-clock budget ran out; ``str()`` is the reason the task ends with."""


class WallClock:
    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        self.used = 0.0
        self._started: datetime | None = None

    @property
    def running(self) -> bool:
        """Whether an active segment runs now (the budget is being spent)."""
        return self._started is not None

    def seconds(self) -> float:
        """Active seconds so far, the running segment included."""
        if self._started is None:
            return self.used
        return self.used + float((workflow.now() - self._started).total_seconds())

    async def run(self, segment: Coroutine[Any, Any, T]) -> T:
        """Run ``segment`` within what is left; ``OutOfTime`` when the timer fires first."""
        self._started = workflow.now()
        try:
            result = await self._within(segment)
        except (asyncio.CancelledError, Exception):
            self._stop()
            raise
        # Anything else (a worker evicting this run from its cache, a BaseException) must
        # not touch the clock: the run is not ending, it is being dropped from memory.
        self._stop()
        return result

    async def _within(self, segment: Coroutine[Any, Any, T]) -> T:
        if self.limit is None:
            return await segment
        left = self.limit - self.used
        if left <= 0:
            segment.close()
            raise OutOfTime("wall-clock budget spent")
        try:
            return await asyncio.wait_for(segment, timeout=left)
        except TimeoutError:
            raise OutOfTime(f"wall-clock budget of {self.limit:g} s spent") from None

    def _stop(self) -> None:
        self.used = self.seconds()
        self._started = None
