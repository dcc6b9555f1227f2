"""Subscription groups: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
DELETE_SUBSCRIPTIONGROUP (207) and 5.x's GET_SUBSCRIPTIONGROUP_CONFIG (352); the table they change is
rmqha/broker/managers/subscriptions.py's SubscriptionGroupManager."""

from __future__ import annotations

from rmqha.broker.managers.subscriptions import SubscriptionGroupConfig, SubscriptionGroupManager
from rmqha.broker.managers.topics import SLAVE_REFUSES
from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.support import validation


class SubscriptionGroupProcessors(Processors):
    def __init__(self, groups: SubscriptionGroupManager, offsets=None):
        self.groups = groups
        self.offsets = offsets  # ConsumerOffsetManager: DELETE_SUBSCRIPTIONGROUP's removeOffset

    def _slave(self, req: RemotingCommand) -> RemotingCommand | None:
        if self.groups.config.is_master:
            return None
        return req.make_response(ResponseCode.SYSTEM_ERROR, SLAVE_REFUSES)

    @handles(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
    def update_and_create(self, req: RemotingCommand, ctx) -> RemotingCommand:
        refused = self._slave(req)
        if refused is not None:
            return refused
        # 4.9 decodes the body with fastjson; an empty body is a null config and changes nothing.
        if req.body:
            self.groups.update(
                SubscriptionGroupConfig.from_json(json_body.loads_request(req.body, "subscription group"))
            )
        return req.make_response()

    @handles(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    def get_all(self, req: RemotingCommand, ctx) -> RemotingCommand:
        return req.make_response(body=self.groups.encode_for_wire())

    @handles(RequestCode.DELETE_SUBSCRIPTIONGROUP)
    def delete(self, req: RemotingCommand, ctx) -> RemotingCommand:
        refused = self._slave(req)
        if refused is not None:
            return refused
        group = req.get_str("groupName")
        self.groups.delete(group)
        if req.get_bool("removeOffset", False) and self.offsets is not None:
            self.offsets.remove_group(group)
        return req.make_response()

    @handles(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG)
    def get_one(self, req: RemotingCommand, ctx) -> RemotingCommand:
        """5.x: header group, body the SubscriptionGroupConfig. 5.x looks it up with
        findSubscriptionGroupConfig, so an unknown group is created when auto-creation is on."""
        sg = self.groups.find_or_create(validation.check_group(req.get_str("group")))
        if sg is None:
            return req.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
        return req.make_response(body=json_body.dumps(sg.to_json()))
