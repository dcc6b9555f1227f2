"""A Java bean's JSON as fastjson writes it, from a Python object: each property under its getter's name
in camelCase (getLastError() -> "lastError"), which is the attribute's name in camelCase here
(last_error). RocketMQ's bodies and this project's status and report JSON all follow that convention;
tests/unit/support/test_beans.py."""

from __future__ import annotations

from functools import lru_cache
from operator import attrgetter
from typing import Any


def bean_json(obj: object, properties: str) -> dict[str, Any]:
    """{camelCase name: value} of obj's attributes named in `properties`, in that order.

    `properties` is whitespace-separated attribute names; `key=attribute` gives a key that is not the
    attribute's camelCase (fastjson writes isBatch() as "batch").
    """
    return {key: getattr(obj, attr) for key, attr in _parse(properties)}


def camel(name: str) -> str:
    """snake_case -> camelCase: last_error -> lastError."""
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


@lru_cache(maxsize=None)
def _parse(properties: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in properties.split():
        key, eq, attr = item.partition("=")
        out.append((key, attr) if eq else (camel(item), item))
    return tuple(out)


def forwarded(path: str) -> Any:
    """A read-only property that is a member's: `min_offset = forwarded("queue.min_offset")` (a Java getter
    that returns its field's getter, getMinOffset() { return queue.getMinOffset(); })."""
    return property(attrgetter(path), doc=f"self.{path}")
