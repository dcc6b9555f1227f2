"""The ACL admin requests of 4.9.8's AdminBrokerProcessor: UPDATE_AND_CREATE_ACL_CONFIG (50),
DELETE_ACL_CONFIG (51), GET_BROKER_CLUSTER_ACL_INFO (52), UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53), as
`mqadmin updateAclConfig / deleteAclConfig / clusterAclConfigVersion / updateGlobalWhiteAddr` send them.

An edit reads plain_acl.yml from disk (as 4.9.8 does), changes it (rmqha/broker/acl/edits.py), checks the
result loads, writes it whole (tmp file + rename) and puts it in force at once; anything refused leaves
the file untouched. Answers: SUCCESS, or 209 / 210 / 211 with 4.9.8's remark (the reason for a bad
field). 52 answers 4.9.8's GetBrokerAclConfigResponseHeader: version (the file's DataVersion JSON),
allAclFileVersion ({path: DataVersion}), brokerName, brokerAddr, clusterName.

Under ACL all four are admin requests (rmqha/broker/acl/rules.py). Not as 4.9.8: with aclEnable=false 4.9.8 fails
on a null validator (no remark, or no answer at all for 52); here each is answered with a remark
saying ACL is off. 53's aclFileFullPath may be left out (4.9.8 needs it although mqadmin's -p is
optional) and must otherwise name the one file this broker reads (4.9.8 writes any .yml under
ROCKETMQ_HOME).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from rmqha.broker.acl import edits as acl_admin
from rmqha.broker.acl.rules import AclConfig, AclConfigError
from rmqha.broker.acl.edits import AccessUpdate, AclAdminError
from rmqha.broker.support.log_limit import LogLimiter
from rmqha.broker.support.files import atomic_write
from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles

log = logging.getLogger("rmqha.broker.acl")

ACL_OFF = (
    "ACL is off on this broker (aclEnable=false), so there is no plain_acl.yml to read or change; "
    "set aclEnable=true (and aclConfigFile) and restart it"
)


class AclAdminProcessors(Processors):
    def __init__(self, config, acl_service, clock):
        self.config = config
        self.acl = acl_service  # rmqha.broker.acl.service.AclService, or None with aclEnable=false
        self.clock = clock
        self.limiter = LogLimiter(log)

    # -- the requests --------------------------------------------------------------------------------
    @handles(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG)
    def update_and_create(self, req: RemotingCommand, ctx) -> RemotingCommand:
        f = req.ext_fields
        u = AccessUpdate(
            access_key=req.get_str("accessKey"),
            secret_key=f.get("secretKey"),
            white_remote_address=f.get("whiteRemoteAddress"),
            admin=req.get_bool("admin", False),
            default_topic_perm=f.get("defaultTopicPerm"),
            default_group_perm=f.get("defaultGroupPerm"),
            topic_perms=acl_admin.split_list(f.get("topicPerms")),
            group_perms=acl_admin.split_list(f.get("groupPerms")),
        )
        failed = f"The accesskey[{u.access_key}] corresponding to accessConfig has been updated failed."
        return self._edit(
            req,
            ctx,
            ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
            failed,
            lambda doc: acl_admin.upsert_account(doc, u),
            f"account {u.access_key} created/updated",
        )

    @handles(RequestCode.DELETE_ACL_CONFIG)
    def delete(self, req: RemotingCommand, ctx) -> RemotingCommand:
        ak = req.get_str("accessKey")
        failed = f"The accesskey[{ak}] corresponding to accessConfig has been deleted failed."
        return self._edit(
            req,
            ctx,
            ResponseCode.DELETE_ACL_CONFIG_FAILED,
            failed,
            lambda doc: acl_admin.delete_account(doc, ak),
            f"account {ak} deleted",
        )

    @handles(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG)
    def update_global_white(self, req: RemotingCommand, ctx) -> RemotingCommand:
        addrs = req.get_str("globalWhiteAddrs")
        patterns = acl_admin.split_list(addrs) or []
        code = ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
        target = req.ext_fields.get("aclFileFullPath")
        if self.acl is not None and target and not _same_file(target, self.acl.path):
            return req.make_response(
                code,
                f"aclFileFullPath {target} is not the ACL file of this broker; it "
                f"reads one file, {os.path.abspath(self.acl.path)} (aclConfigFile)",
            )
        failed = f"The globalWhiteAddresses[{addrs}] has been updated failed."
        return self._edit(
            req,
            ctx,
            code,
            failed,
            lambda doc: acl_admin.set_global_white(doc, patterns),
            f"globalWhiteRemoteAddresses set to {patterns}",
        )

    @handles(RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
    def get_acl_info(self, req: RemotingCommand, ctx) -> RemotingCommand:
        if self.acl is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, ACL_OFF)
        version = json_body.dumps(self.acl.version).decode()
        every = json_body.dumps({os.path.abspath(self.acl.path): self.acl.version}).decode()
        c = self.config
        return req.make_response(
            ext_fields={
                "version": version,
                "allAclFileVersion": every,
                "brokerName": c.brokerName,
                "brokerAddr": c.broker_addr,
                "clusterName": c.brokerClusterName,
            }
        )

    # -- one edit of plain_acl.yml -------------------------------------------------------------------
    def _edit(
        self,
        req: RemotingCommand,
        ctx,
        failed_code: int,
        not_found: str,
        edit: Callable[[dict], dict | None],
        what: str,
    ) -> RemotingCommand:
        if self.acl is None:
            return req.make_response(failed_code, ACL_OFF)
        path = self.acl.path
        try:
            doc = acl_admin.load_doc(self.acl.read_file().decode("utf-8", errors="replace"), path)
            new = edit(doc)
            if new is None:
                return self._refuse(req, ctx, failed_code, not_found)
            new, version = acl_admin.next_version(new, int(self.clock.seconds() * 1000))
            config = AclConfig.from_dict(new, path)  # never write what the broker would not load
            data = acl_admin.dump(new)
        except AclAdminError as e:
            return self._refuse(req, ctx, failed_code, str(e))
        except AclConfigError as e:
            return self._refuse(req, ctx, failed_code, f"{e}; nothing was changed")
        try:
            atomic_write(path, data)
        except OSError as e:
            _remove_quietly(f"{path}.tmp")
            log.error("ACL admin request %d from %s: cannot write %s: %s", req.code, ctx.peer_address, path, e)
            return req.make_response(failed_code, f"cannot write {path} ({e.strerror}); nothing was changed")
        self.acl.install(data, config, version)
        log.info("ACL admin request %d from %s: %s in %s", req.code, ctx.peer_address, what, path)
        return req.make_response()

    def _refuse(self, req: RemotingCommand, ctx, code: int, remark: str) -> RemotingCommand:
        self.limiter.log(
            logging.WARNING,
            ("acl admin", req.code),
            "ACL admin request %d from %s refused: %s",
            req.code,
            ctx.peer_address,
            remark,
        )
        return req.make_response(code, remark)


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
