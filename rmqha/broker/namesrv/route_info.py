"""The name server's routing tables, IO-free (time and channels are passed in).

Mirrors Java 4.9's RouteInfoManager: brokers register every 30 s; an entry not refreshed for
120 s expires; a closed channel drops its broker at once; only masters (brokerId 0) feed the
per-topic queue data, slaves only add their address to the broker group.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Hashable

from rmqha.broker.support.errors import BadRequest
from rmqha.broker.support.beans import bean_json
from rmqha.broker.support.log_limit import LogLimiter
from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig
from rmqha.broker.remoting.codes import DEFAULT_MAX_FRAME_LENGTH, MASTER_ID, PERM_READ, PERM_WRITE

log = logging.getLogger(__name__)

BROKER_CHANNEL_EXPIRED_MS = 120_000
# (topic, broker group) route entries kept in all, whatever the number of brokers: about 430 bytes each
# (65,536 topics cost 28 MiB), so the default holds at most ~110 MiB of routes (--max-topic-routes).
MAX_TOPIC_ROUTES = 262_144
# A route reply's body stays this far below the frame limit: the header and orderTopicConf (a KV value,
# at most 64 KiB) need room too.
MAX_ROUTE_BYTES = DEFAULT_MAX_FRAME_LENGTH - (1 << 20)
TOPIC_FLAG_UNIT, TOPIC_FLAG_UNIT_SUB = 0x1, 0x2  # TopicSysFlag


@dataclass
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int

    def to_json(self) -> dict:
        # 4.9 name: topicSysFlag (topicSynFlag up to 4.8); the C++ client ignores it either way.
        return bean_json(self, "broker_name perm read_queue_nums topic_sys_flag write_queue_nums")


@dataclass
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        # enableActingMaster is 5.x's (a primitive boolean, always written); rocketmq-client-rust
        # requires it, 4.x clients ignore it. zoneName (5.x) is null here, which fastjson leaves out.
        return {
            "brokerAddrs": {str(i): a for i, a in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
            "enableActingMaster": False,
        }


@dataclass
class BrokerLiveInfo:
    last_update_ms: int
    data_version: dict
    channel: Hashable
    ha_server_addr: str


@dataclass
class RegisterResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


def same_version(a: dict | None, b: dict | None) -> bool:
    """DataVersion.equals: timestamp and counter."""
    if a is None or b is None:
        return False
    return (a.get("timestamp"), a.get("counter")) == (b.get("timestamp"), b.get("counter"))


class RouteInfoManager:
    def __init__(
        self,
        expiry_ms: int = BROKER_CHANNEL_EXPIRED_MS,
        max_brokers: int = 1024,
        max_topic_routes: int = MAX_TOPIC_ROUTES,
        max_route_bytes: int = MAX_ROUTE_BYTES,
    ):
        self.expiry_ms = expiry_ms
        self.max_brokers = max_brokers
        self.max_topic_routes = max_topic_routes
        self.max_route_bytes = max_route_bytes
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        # broker name -> its topics in topic_queue_table: removing a broker group touches its own topics,
        # not every topic (closing 16 brokers of 65,536 topics each took 5.2 s of reactor time)
        self.broker_topics: dict[str, set[str]] = {}
        self.route_entries = 0  # (topic, broker group) pairs in topic_queue_table, bounded by max_topic_routes
        self.route_log = LogLimiter(log)
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # ---- registration ---------------------------------------------------------------------------

    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        body: RegisterBrokerBody | None,
        channel: Hashable,
        now_ms: int,
    ) -> RegisterResult:
        if broker_addr not in self.broker_live_table and len(self.broker_live_table) >= self.max_brokers:
            raise BadRequest(
                f"this name server keeps at most {self.max_brokers} live brokers (--max-brokers); "
                f"{broker_addr} is refused until one leaves"
            )
        known = self.broker_addr_table.get(broker_name)
        register_first = known is None or known.broker_addrs.get(broker_id) is None
        data_version = body.data_version if body is not None else {"counter": 0, "timestamp": 0}
        apply_topics = (
            body is not None
            and broker_id == MASTER_ID
            and (register_first or self.is_broker_topic_config_changed(broker_addr, data_version))
        )
        if apply_topics:  # refused before anything changes
            assert body is not None
            self._check_route_room(broker_name, body)
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        broker_data = self._list_broker(cluster_name, broker_name, broker_id, broker_addr)
        if apply_topics:
            assert body is not None
            self._apply_topics(broker_name, body)
        self._mark_live(
            cluster_name, broker_addr, broker_name, broker_id, ha_server_addr, data_version, channel, now_ms
        )
        filters = body.filter_servers if body is not None else []
        if filters:
            self.filter_server_table[broker_addr] = list(filters)
        else:
            self.filter_server_table.pop(broker_addr, None)
        return self._register_result(broker_data, broker_id)

    def _check_route_room(self, broker_name: str, body: RegisterBrokerBody) -> None:
        """BadRequest when the registration's new topic routes would pass --max-topic-routes."""
        own = self.broker_topics.get(broker_name, ())
        new_entries = sum(1 for name in body.topic_configs if name not in own)
        if self.route_entries + new_entries > self.max_topic_routes:
            raise BadRequest(
                f"this name server keeps at most {self.max_topic_routes} topic routes in all "
                f"(--max-topic-routes) and holds {self.route_entries}; the {new_entries} new "
                f"ones of {broker_name} are refused"
            )

    def _list_broker(self, cluster_name: str, broker_name: str, broker_id: int, broker_addr: str) -> BrokerData:
        """The broker's address under its group and id (the group created on its first registration)."""
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            broker_data = BrokerData(cluster_name, broker_name)
            self.broker_addr_table[broker_name] = broker_data
        # A slave promoted to master (same ip:port, new id) must not stay listed under its old id.
        for old_id in [i for i, a in broker_data.broker_addrs.items() if a == broker_addr and i != broker_id]:
            del broker_data.broker_addrs[old_id]
        broker_data.broker_addrs[broker_id] = broker_addr
        return broker_data

    def _apply_topics(self, broker_name: str, body: RegisterBrokerBody) -> None:
        """A master's topic configs into the routes; one log line however many topics it carries."""
        new = changed = 0
        for tc in body.topic_configs.values():
            outcome = self._create_and_update_queue_data(broker_name, tc)
            new += outcome == "new"
            changed += outcome == "changed"
        if new or changed:
            log.info(
                "topic routes of %s: %d new, %d changed (of %d in its registration)",
                broker_name,
                new,
                changed,
                len(body.topic_configs),
            )

    def _mark_live(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        data_version: dict,
        channel: Hashable,
        now_ms: int,
    ) -> None:
        previous = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(now_ms, data_version, channel, ha_server_addr)
        if previous is None:
            log.info(
                "new broker registered, %s %s (id %d, cluster %s, HA %s)",
                broker_name,
                broker_addr,
                broker_id,
                cluster_name,
                ha_server_addr,
            )

    def _register_result(self, broker_data: BrokerData, broker_id: int) -> RegisterResult:
        """For a slave: its master's address and HA address, once that master is live."""
        result = RegisterResult()
        if broker_id != MASTER_ID:
            master_addr = broker_data.broker_addrs.get(MASTER_ID)
            master_live = self.broker_live_table.get(master_addr) if master_addr else None
            if master_live is not None:
                result.ha_server_addr = master_live.ha_server_addr
                result.master_addr = master_addr
        return result

    def _create_and_update_queue_data(self, broker_name: str, tc: TopicConfig) -> str | None:
        queue_data = QueueData(broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
        by_broker = self.topic_queue_table.setdefault(tc.topic_name, {})
        old = by_broker.get(broker_name)
        if old != queue_data:
            by_broker[broker_name] = queue_data
            if old is None:
                self.broker_topics.setdefault(broker_name, set()).add(tc.topic_name)
                self.route_entries += 1
            log.debug(
                "topic route %s on %s: %s", tc.topic_name, broker_name, "new" if old is None else f"changed from {old}"
            )
            return "new" if old is None else "changed"
        return None

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: dict) -> bool:
        live = self.broker_live_table.get(broker_addr)
        return live is None or not same_version(live.data_version, data_version)

    def query_broker_data_version(self, broker_addr: str) -> dict | None:
        live = self.broker_live_table.get(broker_addr)
        return live.data_version if live is not None else None

    def touch_broker(self, broker_addr: str, now_ms: int) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update_ms = now_ms

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        log.info("unregister broker %s %s (id %d)", broker_name, broker_addr, broker_id)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None:
            # Java removes by id without comparing the address.
            broker_data.broker_addrs.pop(broker_id, None)
            if not broker_data.broker_addrs:
                self._remove_broker_name(broker_name, broker_data.cluster)

    # ---- liveness -------------------------------------------------------------------------------

    def scan_not_active_brokers(self, now_ms: int) -> list[Hashable]:
        """Drop brokers not heard from for expiry_ms; returns their channels for the caller to close."""
        expired = [
            (addr, live)
            for addr, live in self.broker_live_table.items()
            if live.last_update_ms + self.expiry_ms < now_ms
        ]
        for addr, live in expired:
            log.warning("broker channel expired, %s, %d ms since last registration", addr, now_ms - live.last_update_ms)
            self.broker_live_table.pop(addr, None)
            self._on_broker_gone(addr)
        return [live.channel for _, live in expired]

    def on_channel_closed(self, channel: Hashable) -> None:
        # every broker registered over this connection (one, from a real broker; a peer registering many
        # over one connection must not leave them behind when it goes)
        for addr in [a for a, live in self.broker_live_table.items() if live.channel is channel]:
            log.info("broker channel closed, removing %s", addr)
            del self.broker_live_table[addr]
            self._on_broker_gone(addr)

    def _on_broker_gone(self, broker_addr: str) -> None:
        self.filter_server_table.pop(broker_addr, None)
        for broker_name, broker_data in list(self.broker_addr_table.items()):
            for i in [i for i, a in broker_data.broker_addrs.items() if a == broker_addr]:
                del broker_data.broker_addrs[i]
            if not broker_data.broker_addrs:
                self._remove_broker_name(broker_name, broker_data.cluster)

    def _remove_broker_name(self, broker_name: str, cluster_name: str) -> None:
        self.broker_addr_table.pop(broker_name, None)
        names = self.cluster_addr_table.get(cluster_name)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster_name]
        for topic in self.broker_topics.pop(broker_name, ()):
            self._drop_route(topic, broker_name)
        log.info("broker group %s removed from cluster %s and from all topic routes", broker_name, cluster_name)

    def _drop_route(self, topic: str, broker_name: str) -> None:
        """The topic's queue data on broker_name (the index is the caller's to update)."""
        by_broker = self.topic_queue_table.get(topic)
        if by_broker is not None and by_broker.pop(broker_name, None) is not None:
            self.route_entries -= 1
            if not by_broker:
                del self.topic_queue_table[topic]

    # ---- queries --------------------------------------------------------------------------------

    def pickup_topic_route(self, topic: str) -> dict | None:
        """TopicRouteData as a JSON-ready dict, or None when the topic has no live route."""
        by_broker = self.topic_queue_table.get(topic)
        if not by_broker:
            return None
        # Never grown past max_route_bytes (a reply past the frame limit reaches no client, so every
        # producer of the topic would lose its route): broker groups first, filter servers with what is
        # left; what does not fit is left out and logged.
        budget = self.max_route_bytes - 256  # the keys and brackets around the lists
        queue_datas, broker_datas, groups = [], [], []
        dropped_groups = dropped_filters = 0
        for _, q in sorted(by_broker.items()):
            bd = self.broker_addr_table.get(q.broker_name)
            qj, bj = q.to_json(), bd.to_json() if bd is not None else None
            size = _json_len(qj) + (_json_len(bj) if bj is not None else 0) + 2
            if size > budget:
                dropped_groups += 1
                continue
            budget -= size
            queue_datas.append(qj)
            if bd is not None:
                broker_datas.append(bj)
                groups.append(bd)
        filter_servers: dict[str, list[str]] = {}
        for bd in groups:
            for addr in bd.broker_addrs.values():
                if addr in self.filter_server_table:
                    servers = list(self.filter_server_table[addr])
                    size = _json_len({addr: servers}) + 1
                    if size > budget:
                        dropped_filters += 1
                        continue
                    budget -= size
                    filter_servers[addr] = servers
        if dropped_groups or dropped_filters:
            self.route_log.log(
                logging.WARNING,
                ("route too big", topic),
                "the route of topic %s would pass %d bytes: left out %d broker groups and the "
                "filter servers of %d brokers",
                topic,
                self.max_route_bytes,
                dropped_groups,
                dropped_filters,
            )
        if not broker_datas:
            return None
        return {
            "brokerDatas": broker_datas,
            "filterServerTable": filter_servers,
            "queueDatas": queue_datas,
        }

    def cluster_info(self) -> dict:
        return {
            "brokerAddrTable": {name: bd.to_json() for name, bd in sorted(self.broker_addr_table.items())},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.cluster_addr_table.items())},
        }

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster_name: str) -> list[str]:
        """Topics with queue data on any broker group of the cluster (none for an unknown cluster)."""
        names = self.cluster_addr_table.get(cluster_name, set())
        return sorted(t for t, by_broker in self.topic_queue_table.items() if names & by_broker.keys())

    def system_topic_list(self) -> tuple[list[str], str | None]:
        """4.9's GET_SYSTEM_TOPIC_LIST_FROM_NS: every cluster name and broker name (4.9 creates a topic
        of each name on its brokers), and one broker address for the tool to ask next."""
        names: set[str] = set()
        for cluster, broker_names in self.cluster_addr_table.items():
            names.add(cluster)
            names.update(broker_names)
        addr = None
        for _, bd in sorted(self.broker_addr_table.items()):
            if bd.broker_addrs:
                addr = bd.broker_addrs[min(bd.broker_addrs)]
                break
        return sorted(names), addr

    def topics_by_sys_flag(self, pick) -> list[str]:
        """Topics whose first queue data's topicSysFlag satisfies pick(flag); 4.9 looks at one queue
        data per topic (they agree unless brokers were configured apart)."""
        return sorted(
            t
            for t, by_broker in self.topic_queue_table.items()
            if by_broker and pick(next(iter(by_broker.values())).topic_sys_flag)
        )

    # ---- write permission (mqadmin wipeWritePerm / addWritePerm) ------------------------------------

    def wipe_write_perm(self, broker_name: str) -> int:
        """Clear PERM_WRITE on every topic route of the broker group; the count of its topics.

        As 4.9, the change lives in this name server's table only: the broker's periodic registration
        carries the same data version and leaves it alone, until the broker's topic config changes (a
        new data version) or it registers anew (restart, expiry), which restores the broker's own perms."""
        return self._set_perm(broker_name, lambda perm: perm & ~PERM_WRITE)

    def add_write_perm(self, broker_name: str) -> int:
        """4.9 sets the perm to READ|WRITE (whatever it was, PERM_INHERIT included); the count of topics."""
        return self._set_perm(broker_name, lambda _perm: PERM_READ | PERM_WRITE)

    def _set_perm(self, broker_name: str, change) -> int:
        count = 0
        for topic in self.broker_topics.get(broker_name, ()):
            qd = self.topic_queue_table[topic].get(broker_name)
            if qd is not None:
                qd.perm = change(qd.perm)
                count += 1
        return count

    def delete_topic(self, topic: str, cluster_name: str = "") -> None:
        """The topic's routes; with a cluster name (4.9.8's mqadmin deleteTopic -c), only those of that
        cluster's broker groups, the topic gone when no group is left."""
        by_broker = self.topic_queue_table.get(topic)
        if by_broker is None:
            return
        names = list(by_broker) if not cluster_name else self.cluster_addr_table.get(cluster_name, ())
        for broker_name in list(names):
            own = self.broker_topics.get(broker_name)
            if own is not None:
                own.discard(topic)
                if not own:
                    del self.broker_topics[broker_name]
            self._drop_route(topic, broker_name)


def _json_len(obj) -> int:
    """At least the bytes obj takes in a reply body (json_body.dumps writes UTF-8; an ASCII escape is
    never shorter)."""
    return len(json.dumps(obj, separators=(",", ":")))
