"""The slice of Twisted's IReactorTime the IO-free code uses, as typing Protocols.

A reactor and twisted.internet.task.Clock (the tests') both fit. Twisted types these with zope
interfaces (IReactorTime, IDelayedCall), which mypy cannot check without the mypy-zope plugin, so the
IO-free modules name what they call instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class DelayedCall(Protocol):
    """What callLater returns (IDelayedCall): enough to cancel a timer that has not fired."""

    def active(self) -> bool: ...

    def cancel(self) -> None: ...


class Clock(Protocol):
    """seconds() and callLater(), as the reactor and task.Clock provide them."""

    def seconds(self) -> float: ...

    # Any: Twisted declares the result as the zope interface IDelayedCall, which mypy reads as a class
    # whose methods take no self; the caller keeps it as a DelayedCall.
    def callLater(self, delay: float, callable: Callable[..., object], /, *args: object, **kw: object) -> Any: ...
