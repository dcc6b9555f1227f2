"""Named seams: the few points where the broker lets a control change what it does, each a small hook
whose default changes nothing.

The product calls every seam on its ordinary path; nothing in rmqha/broker/ fills one. The only filler
is the controls package (rmqha/controls/planted.py: the planted bugs the audit's own tests need). The
broker never imports it: an import contract in pyproject.toml forbids rmqha.broker -> rmqha.controls,
and the process entry (rmqha/broker/__main__.py) loads the installer by its name, CONTROLS_INSTALLER,
only when plantBug= is set. Code that builds a BrokerServer itself passes `seams=`; a config that sets
plantBug without its seams installed is refused (BrokerController), so a planted bug is never silently off.

The seams, and where the broker calls them:
* flush wait (`flush_wait`): False = no flush service runs and a SYNC_FLUSH send is answered without
  waiting for its fdatasync (controller: _start_flusher, await_stored);
* replication wait (`replication_wait`): False = a SYNC_MASTER answers without waiting for a slave
  (controller: await_stored);
* store flush (`store_flush`): called with (store, its flush) once the flush service exists; what each
  returns replaces the store's flush (fdatasync, returning the offset it covered) for every caller;
* before recovery (`before_recovery`): called with the controller once its store is opened, before it
  recovers (its files as the last run left them);
* store started (`store_started`): called with the controller once its store has started, before the
  flush service and the HA role;
* post-put hook (`after_put`): called with (controller, message) after a message the Python send path
  stored (PUT_OK), before its waits; with any seam installed every send takes the Python path (`active`);
* replica store (`replica_store`): wrappers of the store a slave's HA client writes replicated bytes to;
* serving wrapper (`serving`): called with the BrokerServer once its pull processor and consumer offsets
  exist (what PULL_MESSAGE answers and what an offset commit stores).
Where a seam reaches into a part (the store's `unit_filter`), that part documents its own hook with a
default that changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

# The controls' installer: a module with seams_for(plantBug value) -> Seams. Named here, imported only by
# the process entry and only when plantBug= is set; rmqha.broker never imports it statically.
CONTROLS_INSTALLER = "rmqha.controls.planted"


class Seams:
    def __init__(self) -> None:
        self.installed: dict[str, str] = {}  # name -> what it breaks: /status plantedBugs, the start-up ERROR
        self.flush_wait = True
        self.replication_wait = True
        self.store_flush: list[Callable[[Any, Callable[[], int]], Callable[[], int]]] = []
        self.before_recovery: list[Callable[[Any], None]] = []
        self.store_started: list[Callable[[Any], None]] = []
        self.after_put: list[Callable[[Any, Any], None]] = []
        self.replica_store: list[Callable[[Any], Any]] = []
        self.serving: list[Callable[[Any], None]] = []

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.installed)

    @property
    def active(self) -> bool:
        """Anything installed: every send then takes the Python path, where the seams are called."""
        return bool(self.installed)

    @staticmethod
    def wrap(wrappers: Iterable[Callable[[T], T]], value: T) -> T:
        """`value` through each wrapper, in the order they were installed."""
        for wrapper in wrappers:
            value = wrapper(value)
        return value

    @staticmethod
    def call(hooks: Iterable[Callable[..., None]], *args: Any) -> None:
        for hook in hooks:
            hook(*args)
