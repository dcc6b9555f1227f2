"""Subscription groups: the SubscriptionGroupManager (persisted to <storePathRootDir>/config/
subscriptionGroup.json). Its requests (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG
(201), DELETE_SUBSCRIPTIONGROUP (207), 5.x's GET_SUBSCRIPTIONGROUP_CONFIG (352)) are
rmqha/broker/processors/subscription_groups.py.

As 4.9.8's SubscriptionGroupManager:
* the file and GET_ALL's body are a SubscriptionGroupWrapper {"dataVersion":{...},
  "subscriptionGroupTable":{group: SubscriptionGroupConfig}};
* the built-in groups (TOOLS_CONSUMER, FILTERSRV_CONSUMER, SELF_TEST_C_GROUP and the ONS ones) exist
  from the start;
* a group is created with the defaults the first time a consumer heartbeats or pulls, when
  autoCreateSubscriptionGroup is true (4.9's default) or the group is a CID_RMQ_SYS_ one;
* every change bumps the data version and is written at once; a slave refuses changes and copies
  its master's table (slave_sync).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields

from rmqha.broker.support import validation
from rmqha.broker.support.errors import BadRequest
from rmqha.broker.remoting import json_body

from rmqha.broker.support.files import atomic_write, read_json_file
from rmqha.broker.managers.versioned import VersionedTable, read_version

log = logging.getLogger("rmqha.broker.subscription_groups")

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
FILTERSRV_CONSUMER_GROUP = "FILTERSRV_CONSUMER"
SELF_TEST_CONSUMER_GROUP = "SELF_TEST_C_GROUP"
ONS_HTTP_PROXY_GROUP = "CID_ONS-HTTP-PROXY"
CID_ONSAPI_PULL_GROUP = "CID_ONSAPI_PULL"
CID_ONSAPI_PERMISSION_GROUP = "CID_ONSAPI_PERMISSION"
CID_ONSAPI_OWNER_GROUP = "CID_ONSAPI_OWNER"
BUILT_IN_GROUPS = (
    TOOLS_CONSUMER_GROUP,
    FILTERSRV_CONSUMER_GROUP,
    SELF_TEST_CONSUMER_GROUP,
    ONS_HTTP_PROXY_GROUP,
    CID_ONSAPI_PULL_GROUP,
    CID_ONSAPI_PERMISSION_GROUP,
    CID_ONSAPI_OWNER_GROUP,
)
CID_RMQ_SYS_PREFIX = "CID_RMQ_SYS_"  # MixAll.isSysConsumerGroup: always auto-created
# ours: every group is an entry of a file rewritten whenever a group is created (a pull with a new group
# name creates one) and, on heartbeat, a %RETRY% topic; the reference has no bound. As maxTopicCount.
MAX_GROUPS = 10_000


@dataclass
class SubscriptionGroupConfig:
    """4.9.8's SubscriptionGroupConfig, with its defaults."""

    groupName: str
    consumeEnable: bool = True
    consumeFromMinEnable: bool = True
    consumeBroadcastEnable: bool = True
    retryQueueNums: int = 1
    retryMaxTimes: int = 16
    brokerId: int = 0
    whichBrokerWhenConsumeSlowly: int = 1
    notifyConsumerIdsChangedEnable: bool = True

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, obj: dict) -> "SubscriptionGroupConfig":
        """From a request body or a file; a field of the wrong type is BadRequest naming it (fastjson
        would refuse it too), an unknown field is ignored (as fastjson does)."""
        if not isinstance(obj, dict):
            raise BadRequest(f"a subscription group config is a JSON {type(obj).__name__}, not an object")
        group = validation.check_group(str(obj.get("groupName") or ""))
        values = {}
        for f in fields(cls):
            if f.name == "groupName" or obj.get(f.name) is None:
                continue
            values[f.name] = _typed(f.name, obj[f.name], f.type)
        return cls(group, **values)


def _typed(name: str, value, kind: str):
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif kind == "int":
        if isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < (1 << 63):
            return value
        if isinstance(value, str) and value.lstrip("-").isdigit():
            return int(value)
    raise BadRequest(
        f"subscription group field {name} must be a{'n' if kind == 'int' else ''} {kind}, "
        f"not {validation.shown(str(value))}"
    )


class SubscriptionGroupManager(VersionedTable):
    FILE, TABLE_KEY = "subscriptionGroup.json", "subscriptionGroupTable"
    table: dict[str, SubscriptionGroupConfig]

    def __init__(self, config, clock):
        super().__init__(config, clock, {g: SubscriptionGroupConfig(g) for g in BUILT_IN_GROUPS})

    # -- persistence ------------------------------------------------------------------------------
    def load(self) -> None:
        obj = read_json_file(self.path)
        if obj is None:
            return
        self.table.update(self._parse_table(obj.get(self.TABLE_KEY) or {}, self.path))
        self.data_version = read_version(obj.get("dataVersion") or {})
        log.info("loaded %d subscription groups from %s", len(self.table), self.path)

    @staticmethod
    def _parse_table(raw, source: str) -> dict[str, SubscriptionGroupConfig]:
        """Entries that do not parse are left out (logged): one bad entry cannot hide the rest."""
        out = {}
        for name, cfg in raw.items() if isinstance(raw, dict) else ():
            try:
                sg = SubscriptionGroupConfig.from_json({"groupName": name, **cfg} if isinstance(cfg, dict) else cfg)
            except BadRequest as e:
                log.warning("ignoring subscription group %s from %s: %s", validation.shown(str(name)), source, e)
                continue
            out[sg.groupName] = sg
        return out

    def encode_for_wire(self) -> bytes:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body: the file's content plus 5.x's empty forbiddenTable and
        dataVersion.stateVersion 0 (4.9's fastjson ignores them, clients modelled on 5.x require them)."""
        obj = self.to_json()
        obj["dataVersion"]["stateVersion"] = 0
        obj["forbiddenTable"] = {}
        return json_body.dumps(obj)

    def _changed(self) -> None:
        self._next_version()
        try:
            atomic_write(self.path, self.encode())
        except OSError as e:
            log.error("cannot write %s: %s (subscription groups kept in memory)", self.path, e)

    # -- lookups and changes ----------------------------------------------------------------------
    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """4.9's findSubscriptionGroupConfig: the group, created with the defaults when allowed."""
        return self.find_or_create_many([group])[0]

    def find_or_create_many(self, groups: list[str]) -> list[SubscriptionGroupConfig | None]:
        """find_or_create for several groups (a heartbeat's) with one write of the file."""
        out, created = [], False
        for group in groups:
            sg = self.table.get(group)
            if sg is None and (self.config.autoCreateSubscriptionGroup or group.startswith(CID_RMQ_SYS_PREFIX)):
                if len(self.table) >= MAX_GROUPS:
                    log.warning("not creating subscription group %s: %d groups held", group, len(self.table))
                else:
                    sg = self.table[group] = SubscriptionGroupConfig(validation.check_group(group))
                    log.info("auto create a subscription group, %s", sg)
                    created = True
            out.append(sg)
        if created:
            self._changed()
        return out

    def update(self, sg: SubscriptionGroupConfig) -> None:
        if sg.groupName not in self.table and len(self.table) >= MAX_GROUPS:
            raise BadRequest(f"the broker holds {len(self.table)} subscription groups, the most it keeps")
        old = self.table.get(sg.groupName)
        self.table[sg.groupName] = sg
        log.info("subscription group %s: %s -> %s", "updated" if old else "created", old, sg)
        self._changed()

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            log.warning("delete subscription group failed, subscription groupName: %s not exist", group)
            return False
        self._changed()
        return True

    def replace_all(self, raw_table: dict, data_version: dict) -> bool:
        """Slave sync: the master's table replaces ours. True if anything changed."""
        table = self._parse_table(raw_table, "the master")
        dv = read_version(data_version)
        if table == self.table and dv == self.data_version:
            return False
        self.table = table
        self.data_version = dv
        try:
            atomic_write(self.path, self.encode())
        except OSError as e:
            log.error("cannot write %s: %s", self.path, e)
        return True
