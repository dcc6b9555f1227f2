"""What the proxy remembers between RPCs (tests: tests/integration/test_proxy_client5.py): routes, each client's
settings and its Telemetry stream, and the transactions it must be able to end.

Transactions: a half message's END_TRANSACTION needs the broker, its queue offset and commit-log offset,
which the client never sees; 5.x's TransactionDataManager keeps them by producer group and transaction
id, from the send reply and from the broker's check. Same here, with an expiry so a client that never
ends its transaction leaves nothing behind (the broker's check asks again later).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from rmqha.proxy.third_party.rocketmq_apis.v2 import definition_pb2 as d
from rmqha.proxy.third_party.rocketmq_apis.v2 import service_pb2 as s

TRANSACTION_TTL_S = 3600.0
ROUTE_TTL_S = 3.0


@dataclass
class Transaction:
    broker_name: str
    topic: str
    queue_offset: int
    commit_log_offset: int
    message_id: str
    expires: float


@dataclass
class Session:
    """One client (x-mq-client-id): its last settings and the queue its Telemetry stream writes from."""

    client_id: str
    settings: d.Settings | None = None
    outbox: asyncio.Queue = field(default_factory=asyncio.Queue)
    streams: int = 0

    @property
    def client_type(self) -> int:
        return self.settings.client_type if self.settings is not None else d.CLIENT_TYPE_UNSPECIFIED

    def publishes(self, topic: str) -> bool:
        s_ = self.settings
        return (
            s_ is not None
            and s_.WhichOneof("pub_sub") == "publishing"
            and any(t.name == topic for t in s_.publishing.topics)
        )


class State:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self.transactions: dict[str, Transaction] = {}
        self.routes: dict[str, tuple[float, dict]] = {}
        self._rr = 0

    def session(self, client_id: str) -> Session:
        sess = self.sessions.get(client_id)
        if sess is None:
            sess = self.sessions[client_id] = Session(client_id)
        return sess

    def forget(self, client_id: str) -> None:
        self.sessions.pop(client_id, None)

    def next_index(self, n: int) -> int:
        self._rr = (self._rr + 1) % max(1, n)
        return self._rr

    # ---- routes -----------------------------------------------------------------------------------

    def cached_route(self, topic: str) -> dict | None:
        hit = self.routes.get(topic)
        if hit is not None and self.clock() - hit[0] < ROUTE_TTL_S:
            return hit[1]
        return None

    def keep_route(self, topic: str, route: dict) -> None:
        self.routes[topic] = (self.clock(), route)

    def drop_route(self, topic: str) -> None:
        self.routes.pop(topic, None)

    # ---- transactions -----------------------------------------------------------------------------

    def add_transaction(self, transaction_id: str, tx: Transaction) -> None:
        now = self.clock()
        for k in [k for k, v in self.transactions.items() if v.expires < now]:
            del self.transactions[k]
        self.transactions[transaction_id] = tx

    def take_transaction(self, transaction_id: str) -> Transaction | None:
        return self.transactions.pop(transaction_id, None)

    def producers_of(self, topic: str) -> list[Session]:
        return [x for x in self.sessions.values() if x.streams > 0 and x.publishes(topic)]

    def recover_command(self, msg: d.Message, transaction_id: str) -> s.TelemetryCommand:
        return s.TelemetryCommand(
            recover_orphaned_transaction_command=s.RecoverOrphanedTransactionCommand(
                message=msg, transaction_id=transaction_id
            )
        )
