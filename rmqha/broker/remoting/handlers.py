"""Request handlers declared where they are written: ``@handles(RequestCode.X)`` on a method, and one
``Processors`` base whose ``register(registry)`` installs every marked method into a ProcessorRegistry.

RocketMQ 4.9's processor is one switch on the request code (AdminBrokerProcessor.processRequest); here
a family's switch is the set of its marked methods, one family per module (rmqha/broker/processors/,
the name server's rmqha/broker/namesrv/processors.py). tests/unit/remoting/test_handlers.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rmqha.broker.remoting.protocol import ProcessorRegistry

F = TypeVar("F", bound=Callable[..., Any])
When = Callable[[Any], bool]


def handles(*codes: int, when: When | None = None) -> Callable[[F], F]:
    """Mark a method as the handler of these request codes.

    when(processors): the codes are installed only if it is true when register runs, for a code served
    only with an optional part (GET_ALL_DELAY_OFFSET needs the schedule service).
    """
    if not codes:
        raise TypeError("@handles needs at least one request code")

    def mark(method: F) -> F:
        method._handles = (codes, when)  # type: ignore[attr-defined]
        return method

    return mark


class Processors:
    """A family of request handlers: register installs each method marked @handles under its codes."""

    def register(self, registry: ProcessorRegistry) -> None:
        for name, codes, when in handlers(type(self)):
            if when is None or when(self):
                for code in codes:
                    registry.register(code, getattr(self, name))


def handlers(cls: type) -> Iterator[tuple[str, tuple[int, ...], When | None]]:
    """(method name, codes, when) of every marked method of cls, base classes first, each class's in the
    order they are written. register installs getattr(processors, name): a subclass's override of a
    marked method serves its codes."""
    marked: dict[str, tuple[tuple[int, ...], When | None]] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            mark = getattr(value, "_handles", None)
            if mark is not None:
                marked[name] = mark
    for name, (codes, when) in marked.items():
        yield name, codes, when
