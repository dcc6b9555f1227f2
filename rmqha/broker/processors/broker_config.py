"""GET_BROKER_CONFIG (26) and UPDATE_BROKER_CONFIG (25): the broker's settings as 4.9's admin tools
read and change them (`mqadmin getBrokerConfig` / `updateBrokerConfig`).

GET answers properties text (key=value lines) in the body and the configuration's DataVersion JSON in
the header field "version". UPDATE takes properties text; rmqha/broker/config/policy.py decides per key
whether it applies at once, at the next start, or not at all. An update is all or nothing: the config
file is rewritten first (atomically, comments kept), then the live keys are set and the DataVersion
moves on. ACL: UPDATE_BROKER_CONFIG is an admin request (rmqha/broker/acl/rules.py).
"""

from __future__ import annotations

import logging
import os

from rmqha.broker.config import policy as config_policy
from rmqha.broker.config.policy import UpdateRefused
from rmqha.broker.support.files import atomic_write
from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles

log = logging.getLogger("rmqha.broker")

BLACK_LIST_REMARK = "Can not update config in black list."  # 4.9.8's answer, NO_PERMISSION


class BrokerConfigProcessors(Processors):
    def __init__(self, config, clock, topics=None):
        self.config = config
        self.clock = clock
        self.topics = topics  # a brokerPermission change is announced as a topic change (re-registration)
        self.data_version = {"counter": 0, "timestamp": self._now_ms()}

    def _now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    @property
    def path(self) -> str:
        """The file updates go to: the one the broker read (-c), else 4.9's default place."""
        return self.config.config_path or os.path.join(self.config.storePathRootDir, "config", "broker.properties")

    @handles(RequestCode.GET_BROKER_CONFIG)
    def get_broker_config(self, req: RemotingCommand, ctx) -> RemotingCommand:
        body = config_policy.properties_text(self.config).encode("utf-8")
        return req.make_response(ext_fields={"version": json_body.dumps(self.data_version).decode()}, body=body)

    @handles(RequestCode.UPDATE_BROKER_CONFIG)
    def update_broker_config(self, req: RemotingCommand, ctx) -> RemotingCommand:
        if not req.body:
            return req.make_response()  # 4.9: no body, nothing to do
        try:
            props = config_policy.parse_update_body(req.body)
            if config_policy.BLACK_LIST & props.keys():
                return req.make_response(ResponseCode.NO_PERMISSION, BLACK_LIST_REMARK)
            if not props:
                return req.make_response()
            plan = config_policy.plan_update(self.config, props)
        except UpdateRefused as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        try:
            self._persist(plan.text)
        except OSError as e:
            log.error("UPDATE_BROKER_CONFIG from %s: cannot write %s: %s", ctx.peer_address, self.path, e)
            return req.make_response(
                ResponseCode.SYSTEM_ERROR, f"cannot write {self.path} ({e.strerror}); nothing was changed"
            )
        for key in plan.live:
            setattr(self.config, key, plan.values[key])
        self.data_version = {"counter": self.data_version["counter"] + 1, "timestamp": self._now_ms()}
        log.info(
            "UPDATE_BROKER_CONFIG from %s: %s (applied now: %s; at the next start: %s)",
            ctx.peer_address,
            plan.text,
            plan.live or "-",
            plan.restart or "-",
        )
        if "brokerPermission" in plan.live and self.topics is not None:
            self.topics._changed()  # 4.9: a new topic DataVersion and a registration with the name servers
        remark = None
        if plan.restart:
            remark = f"saved in {self.path}; applies at the next start: {', '.join(plan.restart)}"
        return req.make_response(remark=remark)

    def _persist(self, updates: dict[str, str]) -> None:
        try:
            with open(self.path, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            text = ""
        atomic_write(self.path, config_policy.rewrite_properties(text, updates).encode("utf-8"))
