"""Name server request processors: header/body parsing around RouteInfoManager and KVConfigManager."""

from __future__ import annotations

import logging

from twisted.internet.interfaces import IReactorTime

from rmqha.broker.support.log_limit import LogLimiter
from rmqha.broker.namesrv import guard
from rmqha.broker.namesrv.kv_config import ORDER_TOPIC_CONFIG, KVConfigManager
from rmqha.broker.namesrv.namesrv_config import ConfigRefused, NamesrvSettings
from rmqha.broker.namesrv.register_body import RegisterBrokerBody, body_crc32
from rmqha.broker.namesrv.route_info import TOPIC_FLAG_UNIT, TOPIC_FLAG_UNIT_SUB, RouteInfoManager
from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import MASTER_ID, VERSION_V3_0_11, RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.remoting.protocol import ConnectionContext, ProcessorRegistry

log = logging.getLogger(__name__)

MAX_HOLDERS = 4  # connections kept per broker that presented its latest registration (the broker's, and races)


class NameServerProcessors(Processors):
    def __init__(
        self,
        routes: RouteInfoManager,
        kv: KVConfigManager,
        clock: IReactorTime,
        *,
        cluster_secret: str | None = None,
        max_topics_per_broker: int = guard.MAX_TOPICS_PER_BROKER,
        settings: NamesrvSettings | None = None,
        on_settings_changed=None,
        signed_window_s: float = guard.SIGNED_WINDOW_S,
        signed_audience: str | None = None,
    ):
        self.routes = routes
        self.settings = settings if settings is not None else NamesrvSettings()
        self.on_settings_changed = on_settings_changed  # callable(changed keys -> values), or None
        self.kv = kv
        self.clock = clock
        self.cluster_secret = cluster_secret
        self.max_topics_per_broker = max_topics_per_broker
        self.refused_unsigned = 0
        self.refused_stale = 0  # timed requests outside the window
        self.refused_replayed = 0  # timed requests whose nonce or broker time was taken already
        self.refused_audience = 0  # timed requests signed for another name-server instance (or none)
        self.replay_guard = guard.ReplayGuard(
            signed_window_s, max_brokers=4 * routes.max_brokers, audience=signed_audience
        )
        # brokerAddr -> (nonce of its latest REGISTER_BROKER taken, the open connections that presented it):
        # the first, and those that delivered the very same request again (the broker's own copy, when an
        # observer of its path raced it in first). Its live entry moves to another of them when the one it
        # is bound to closes, so an observer's close does not drop the broker. At most MAX_HOLDERS each.
        self.holders: dict[str, tuple[str, list[ConnectionContext]]] = {}
        self._duplicate: RemotingCommand | None = None  # marked by the ACL hook for register_broker
        # a stranger repeats a refused request as often as it likes: one line a minute per kind
        self.log_limit = LogLimiter(log, now=clock.seconds)

    @property
    def audience(self) -> str:
        """This instance's clusterSignAudience (new at every start)."""
        return self.replay_guard.audience

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def registry(self) -> ProcessorRegistry:
        # The Java name server never answers a code it does not know (the client times out); here every
        # request gets an answer: REQUEST_CODE_NOT_SUPPORTED.
        reg = ProcessorRegistry(reply_to_unknown=True)
        reg.acl = self._check_signed
        self.register(reg)
        return reg

    def _check_signed(self, req: RemotingCommand, peer: str):
        """The refusal of a route- or config-changing request not signed with the cluster secret, if one
        is set, or signed timed but stale or replayed (guard.py); None to serve."""
        if self.cluster_secret is None or req.code not in guard.SIGNED_CODES:
            return None
        fields = req.ext_fields or {}
        try:
            guard.check_signed(req.code, fields, req.body, self.cluster_secret, req.version)
        except guard.Unsigned as e:
            self.refused_unsigned += 1
            self.log_limit.log(
                logging.WARNING, ("unsigned", req.code), "refused request code %d from %s: %s", req.code, peer, e
            )
            return self._refusal(req, ResponseCode.NO_PERMISSION, str(e))
        if guard.SIGN_TIME in fields:
            return self._fresh(req, peer)
        return None

    def _audience_fields(self, req: RemotingCommand) -> dict[str, object]:
        """With a secret, every answer to REGISTER/UNREGISTER_BROKER says this instance's audience (a broker
        signs its next copies for it)."""
        if self.cluster_secret is not None and req.code in guard.TIMED_CODES:
            return {guard.SIGN_AUDIENCE: self.audience}
        return {}

    def _refusal(self, req: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        return req.make_response(code, remark, ext_fields=self._audience_fields(req) or None)

    def _fresh(self, req: RemotingCommand, peer: str) -> RemotingCommand | None:
        """ReplayGuard's verdict on a timed request with a valid signature: None when taken (or when it is
        a REGISTER_BROKER identical to the broker's latest one, still live: marked for register_broker to
        answer without applying), else the refusal (counted, and logged at most once a minute per kind)."""
        fields = req.ext_fields or {}
        try:
            self.replay_guard.check(req.code, fields, self.now_ms())
        except guard.Busy as e:
            self.log_limit.log(
                logging.WARNING, ("signed busy", req.code), "refused request code %d from %s: %s", req.code, peer, e
            )
            return self._refusal(req, ResponseCode.SYSTEM_BUSY, str(e))
        except guard.Stale as e:
            self.refused_stale += 1
            self.log_limit.log(
                logging.WARNING, ("stale", req.code), "refused request code %d from %s: %s", req.code, peer, e
            )
            return self._refusal(req, ResponseCode.NO_PERMISSION, str(e))
        except guard.WrongAudience as e:  # routine once per broker after a restart: INFO
            self.refused_audience += 1
            self.log_limit.log(
                logging.INFO, ("audience", req.code), "refused request code %d from %s: %s", req.code, peer, e
            )
            return self._refusal(req, ResponseCode.NO_PERMISSION, str(e))
        except guard.Unsigned as e:  # Replayed, or a malformed time or nonce
            if isinstance(e, guard.Duplicate) and self._is_latest_live(req):
                self._duplicate = req
                return None
            self.refused_replayed += 1
            self.log_limit.log(
                logging.WARNING, ("replayed", req.code), "refused request code %d from %s: %s", req.code, peer, e
            )
            return self._refusal(req, ResponseCode.NO_PERMISSION, str(e))
        return None

    def _is_latest_live(self, req: RemotingCommand) -> bool:
        """A REGISTER_BROKER whose nonce is that of the latest registration taken from its brokerAddr, which
        is still live here."""
        if req.code != RequestCode.REGISTER_BROKER:
            return False
        fields = req.ext_fields or {}
        addr = str(fields.get("brokerAddr", ""))
        held = self.holders.get(addr)
        return (
            held is not None
            and held[0] == str(fields.get(guard.SIGN_NONCE, ""))
            and addr in self.routes.broker_live_table
        )

    def channel_closed(self, ctx: ConnectionContext) -> None:
        """A broker whose live entry is bound to ctx stays when another open connection presented its latest
        registration (then bound to that one); every other broker of ctx goes, as 4.9."""
        for addr, (_, chans) in list(self.holders.items()):
            if ctx not in chans:
                continue
            chans.remove(ctx)
            live = self.routes.broker_live_table.get(addr)
            if live is None or not chans:
                del self.holders[addr]
            elif live.channel is ctx:
                live.channel = chans[0]
        self.routes.on_channel_closed(ctx)

    def scan_not_active_brokers(self) -> None:
        for channel in self.routes.scan_not_active_brokers(self.now_ms()):
            if isinstance(channel, ConnectionContext):
                channel.close()
        for addr in [a for a in self.holders if a not in self.routes.broker_live_table]:
            del self.holders[addr]

    # ---- brokers --------------------------------------------------------------------------------

    @handles(RequestCode.REGISTER_BROKER)
    def register_broker(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        if self._duplicate is req:
            self._duplicate = None
            return self._answer_duplicate(req, ctx)
        broker_name = guard.check_name(req.get_str("brokerName"), "brokerName")
        broker_addr = guard.check_addr(req.get_str("brokerAddr"), "brokerAddr")
        cluster_name = guard.check_name(req.get_str("clusterName"), "clusterName")
        ha_server_addr = guard.check_addr(req.get_str("haServerAddr", ""), "haServerAddr", allow_empty=True)
        broker_id = guard.check_broker_id(req.get_long("brokerId"))
        compressed = req.get_bool("compressed", False)
        crc = req.get_int("bodyCrc32", 0)
        if crc != 0 and body_crc32(req.body) != crc:
            self.log_limit.log(
                logging.WARNING,
                ("crc mismatch",),
                "register from %s (%s): body crc32 %d does not match header %d",
                broker_addr,
                ctx.peer_address,
                body_crc32(req.body),
                crc,
            )
            return req.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")

        if not req.body:
            body = RegisterBrokerBody()
        elif req.version >= VERSION_V3_0_11:
            body = RegisterBrokerBody.decode(req.body, compressed, self.max_topics_per_broker)
        else:
            body = RegisterBrokerBody.from_wrapper_json(
                json_body.loads_request(req.body, "REGISTER_BROKER"), self.max_topics_per_broker
            )
        guard.check_topics(body.topic_configs, self.max_topics_per_broker)
        guard.check_filter_servers(body.filter_servers)

        result = self.routes.register_broker(
            cluster_name, broker_addr, broker_name, broker_id, ha_server_addr, body, ctx, self.now_ms()
        )
        nonce = (req.ext_fields or {}).get(guard.SIGN_NONCE)
        if self.cluster_secret is not None and nonce is not None:
            self.holders[broker_addr] = (str(nonce), [ctx])
        return self._register_reply(req, result.ha_server_addr, result.master_addr)

    def _register_reply(self, req: RemotingCommand, ha_server_addr, master_addr) -> RemotingCommand:
        order_conf = self.kv.namespace(ORDER_TOPIC_CONFIG)
        return req.make_response(
            ext_fields={"haServerAddr": ha_server_addr, "masterAddr": master_addr, **self._audience_fields(req)},
            body=json_body.dumps({"table": order_conf}) if order_conf else b"",
        )

    def _answer_duplicate(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        """The broker's latest registration delivered once more (by the broker, or by an observer of its path
        that raced it): answered as the registration was, nothing applied again (another broker may have
        taken its id since), and ctx noted as a connection the live entry may move to."""
        addr = req.get_str("brokerAddr")
        chans = self.holders[addr][1]
        if ctx not in chans and len(chans) < MAX_HOLDERS:
            chans.append(ctx)
        ha_addr = master_addr = None
        if req.get_long("brokerId") != MASTER_ID:
            data = self.routes.broker_addr_table.get(req.get_str("brokerName"))
            master = data.broker_addrs.get(MASTER_ID) if data is not None else None
            live = self.routes.broker_live_table.get(master) if master else None
            if live is not None:
                ha_addr, master_addr = live.ha_server_addr, master
        return self._register_reply(req, ha_addr, master_addr)

    @handles(RequestCode.UNREGISTER_BROKER)
    def unregister_broker(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        self.routes.unregister_broker(
            req.get_str("clusterName"), req.get_str("brokerAddr"), req.get_str("brokerName"), req.get_long("brokerId")
        )
        self.holders.pop(req.get_str("brokerAddr"), None)
        return req.make_response(ext_fields=self._audience_fields(req) or None)

    @handles(RequestCode.QUERY_DATA_VERSION)
    def query_data_version(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        broker_addr = req.get_str("brokerAddr")
        version = json_body.loads(req.body) if req.body else {}
        changed = self.routes.is_broker_topic_config_changed(broker_addr, version)
        if not changed and self._may_refresh(broker_addr, req, ctx):
            self.routes.touch_broker(broker_addr, self.now_ms())
        ours = self.routes.query_broker_data_version(broker_addr)
        return req.make_response(
            ext_fields={"changed": changed}, body=json_body.dumps(ours) if ours is not None else b""
        )

    def _may_refresh(self, broker_addr: str, req: RemotingCommand, ctx: ConnectionContext) -> bool:
        """Whether this QUERY_DATA_VERSION keeps the broker alive. As 4.9, anyone's does without a cluster
        secret; with one, only a signed query or one over the connection the broker registered on (else
        any stranger keeps a partitioned broker's routes alive, and clients keep sending to it). A signed
        query must be timed and fresh (else a captured one, replayed, keeps a dead broker alive)."""
        if self.cluster_secret is None:
            return True
        live = self.routes.broker_live_table.get(broker_addr)
        if live is not None and live.channel is ctx:
            return True
        fields = req.ext_fields or {}
        if guard.SIGN_TIME not in fields or not guard.is_signed(
            req.code, req.version, fields, req.body, self.cluster_secret
        ):
            return False
        return self._fresh(req, ctx.peer_address) is None

    # ---- routes ---------------------------------------------------------------------------------

    @handles(RequestCode.GET_ROUTEINFO_BY_TOPIC)
    def get_route_info_by_topic(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        topic = req.get_str("topic")
        route = self.routes.pickup_topic_route(topic)
        if route is None:
            return req.make_response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}"
            )
        if self.settings.get("orderMessageEnable"):  # 4.9: off by default, then no orderTopicConf
            order_conf = self.kv.get(ORDER_TOPIC_CONFIG, topic)
            if order_conf:
                route["orderTopicConf"] = order_conf
        # Always standard JSON (quoted map keys): the C++ client and fastjson both read it.
        return req.make_response(body=json_body.dumps(route))

    @handles(RequestCode.GET_BROKER_CLUSTER_INFO)
    def get_broker_cluster_info(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        return req.make_response(body=json_body.dumps(self.routes.cluster_info()))

    @handles(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    def get_all_topic_list(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        return req.make_response(body=json_body.dumps({"topicList": self.routes.all_topics()}))

    @handles(RequestCode.DELETE_TOPIC_IN_NAMESRV)
    def delete_topic(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        self.routes.delete_topic(req.get_str("topic"), req.get_str("clusterName", ""))
        return req.make_response()

    # ---- write permission and topic lists (mqadmin wipeWritePerm, addWritePerm, topicList -c, ...) -----

    @handles(RequestCode.WIPE_WRITE_PERM_OF_BROKER)
    def wipe_write_perm(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        return self._write_perm(req, ctx, "wipe", self.routes.wipe_write_perm, "wipeTopicCount")

    @handles(RequestCode.ADD_WRITE_PERM_OF_BROKER)
    def add_write_perm(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        return self._write_perm(req, ctx, "add", self.routes.add_write_perm, "addTopicCount")

    def _write_perm(self, req: RemotingCommand, ctx: ConnectionContext, verb: str, change, field: str):
        """change(broker name) on every topic route of the broker, logged; the reply counts the topics."""
        broker_name = req.get_str("brokerName")
        count = change(broker_name)
        log.info("%s write perm of broker %s, client %s: %d topics", verb, broker_name, ctx.peer_address, count)
        return req.make_response(ext_fields={field: count})

    @handles(RequestCode.GET_TOPICS_BY_CLUSTER)
    def get_topics_by_cluster(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        return _topic_list(req, self.routes.topics_by_cluster(req.get_str("cluster")))

    @handles(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
    def get_system_topic_list(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        topics, broker_addr = self.routes.system_topic_list()
        return _topic_list(req, topics, broker_addr)

    @handles(RequestCode.GET_UNIT_TOPIC_LIST)
    def get_unit_topic_list(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        return _topic_list(req, self.routes.topics_by_sys_flag(lambda f: bool(f & TOPIC_FLAG_UNIT)))

    @handles(RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST)
    def get_has_unit_sub_topic_list(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        return _topic_list(req, self.routes.topics_by_sys_flag(lambda f: bool(f & TOPIC_FLAG_UNIT_SUB)))

    @handles(RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST)
    def get_has_unit_sub_ununit_topic_list(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        return _topic_list(
            req, self.routes.topics_by_sys_flag(lambda f: not f & TOPIC_FLAG_UNIT and bool(f & TOPIC_FLAG_UNIT_SUB))
        )

    # ---- name server config (mqadmin getNamesrvConfig / updateNamesrvConfig) -------------------------

    @handles(RequestCode.GET_NAMESRV_CONFIG)
    def get_config(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        return req.make_response(body=self.settings.properties_text().encode("utf-8"))

    @handles(RequestCode.UPDATE_NAMESRV_CONFIG)
    def update_config(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        log.info("updateConfig called by %s", ctx.peer_address)
        if not req.body:
            return req.make_response()  # 4.9: nothing to change
        try:
            text = bytes(req.body).decode("utf-8")
        except UnicodeDecodeError:
            return req.make_response(ResponseCode.SYSTEM_ERROR, "the config body is not UTF-8 properties text")
        try:
            changed = self.settings.update(text)
        except ConfigRefused as e:
            log.warning("config update from %s refused: %s", ctx.peer_address, e.remark)
            return req.make_response(e.code, e.remark)
        if changed:
            log.info(
                "name server config changed by %s: %s",
                ctx.peer_address,
                ", ".join(f"{k}={v}" for k, v in sorted(changed.items())),
            )
            if self.on_settings_changed is not None:
                self.on_settings_changed(changed)
        return req.make_response()

    # ---- kv config ------------------------------------------------------------------------------

    @handles(RequestCode.PUT_KV_CONFIG)
    def put_kv_config(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        self.kv.put(req.get_str("namespace"), req.get_str("key"), req.get_str("value"))
        return req.make_response()

    @handles(RequestCode.GET_KV_CONFIG)
    def get_kv_config(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        namespace, key = req.get_str("namespace"), req.get_str("key")
        value = self.kv.get(namespace, key)
        if value is None:
            return req.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}")
        return req.make_response(ext_fields={"value": value})

    @handles(RequestCode.DELETE_KV_CONFIG)
    def delete_kv_config(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        self.kv.delete(req.get_str("namespace"), req.get_str("key"))
        return req.make_response()

    @handles(RequestCode.GET_KVLIST_BY_NAMESPACE)
    def get_kv_list_by_namespace(self, req: RemotingCommand, ctx: ConnectionContext) -> RemotingCommand:
        namespace = req.get_str("namespace")
        table = self.kv.namespace(namespace)
        if table is None:
            return req.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
        return req.make_response(body=json_body.dumps({"table": table}))


def _topic_list(req: RemotingCommand, topics: list[str], broker_addr: str | None = None) -> RemotingCommand:
    """A TopicList body: {"topicList": [...]}, plus brokerAddr when there is one (fastjson leaves null out)."""
    body: dict = {"topicList": topics}
    if broker_addr is not None:
        body["brokerAddr"] = broker_addr
    return req.make_response(body=json_body.dumps(body))
