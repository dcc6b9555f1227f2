"""The broker's ACL on Twisted: rmqha/broker/acl/rules.py's rules, plain_acl.yml reloaded while it runs.

As 4.9's PlainPermissionManager: the file is read at start (a broken file stops the broker with the
reason), then checked every 500 ms by content hash; a changed file that parses replaces the rules at
once, one that does not is logged and the rules in force stay.
"""

from __future__ import annotations

import hashlib
import logging
import os

from rmqha.broker.acl import edits as acl_admin
from rmqha.broker.acl.rules import AclConfig, AclConfigError, AclError, refusal
from rmqha.broker.support.log_limit import LogLimiter
from rmqha.broker.support.supervision import PeriodicService

log = logging.getLogger("rmqha.broker.acl")

RELOAD_INTERVAL_S = 0.5
MAX_FILE_BYTES = 16 << 20


def default_path() -> str:
    home = os.environ.get("ROCKETMQ_HOME") or os.getcwd()
    return os.path.join(home, "conf", "plain_acl.yml")


class AclService:
    def __init__(self, path: str, clock, metrics=None):
        self.path = path
        self.clock = clock
        self.metrics = metrics
        self.limiter = LogLimiter(log)
        raw = self.read_file()
        self.digest = hashlib.md5(raw).hexdigest()
        try:
            self.config, self.version = self._parse(raw)
        except AclConfigError as e:
            raise AclConfigError(f"aclEnable=true: {e}") from None
        self.reloads = 0
        self.refused = 0
        self._ticker: PeriodicService | None = None
        log.info(
            "ACL on: %d account(s), %d global white address pattern(s) from %s",
            len(self.config.accounts),
            len(self.config.global_white),
            path,
        )
        if metrics is not None:
            metrics.gauge("acl_refused", "requests the ACL refused (aclEnable)", lambda: self.refused)
            metrics.gauge("acl_reloads", "times plain_acl.yml was reloaded after a change", lambda: self.reloads)

    def read_file(self) -> bytes:
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read(MAX_FILE_BYTES + 1)
        except OSError as e:
            raise AclConfigError(
                f"aclEnable=true but the ACL file {self.path} cannot be read ({e.strerror}); "
                "write one (see the README's ACL section) or set aclConfigFile"
            ) from None
        if len(raw) > MAX_FILE_BYTES:
            raise AclConfigError(f"{self.path} is larger than {MAX_FILE_BYTES} bytes")
        return raw

    def _parse(self, raw: bytes) -> tuple[AclConfig, dict]:
        """The rules and the file's dataVersion; a file without one is version 0 as of now, as 4.9.8
        reads it (a new DataVersion)."""
        doc = acl_admin.load_doc(raw.decode("utf-8", errors="replace"), self.path)
        config = AclConfig.from_dict(doc, self.path)
        version = acl_admin.data_version(doc) or {"counter": 0, "timestamp": int(self.clock.seconds() * 1000)}
        return config, version

    def install(self, raw: bytes, config: AclConfig, version: dict) -> None:
        """Rules just written to the file by an admin request (rmqha/broker/processors/acl_admin.py): in force
        at once, and the file's hash taken so the reload does not read them again."""
        self.digest = hashlib.md5(raw).hexdigest()
        self.config, self.version = config, version
        log.info(
            "ACL changed by an admin request: %d account(s), %d global white address pattern(s), dataVersion %d",
            len(config.accounts),
            len(config.global_white),
            version["counter"],
        )

    def start(self) -> None:
        self._ticker = PeriodicService(
            "acl_reload", self.reload_if_changed, RELOAD_INTERVAL_S, self.clock, self.metrics, logger=log
        )
        self._ticker.start()

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()

    def reload_if_changed(self) -> None:
        try:
            raw = self.read_file()
        except AclConfigError as e:
            self.limiter.log(logging.ERROR, ("acl read",), "%s; the rules loaded before stay in force", e)
            return
        digest = hashlib.md5(raw).hexdigest()
        if digest == self.digest:
            return
        self.digest = digest
        try:
            self.config, self.version = self._parse(raw)
        except AclConfigError as e:
            log.error("%s changed and cannot be used (%s); the rules loaded before stay in force", self.path, e)
            return
        self.reloads += 1
        log.info("ACL reloaded from %s: %d account(s)", self.path, len(self.config.accounts))

    def check(self, request, peer: str):
        """None when the request may be served, else the refusal to send."""
        ip = peer.rpartition(":")[0].strip("[]") if ":" in peer else peer
        try:
            self.config.validate(request.code, request.ext_fields or {}, request.body, ip)
        except AclError as e:
            self.refused += 1
            # once a minute per address and kind of refusal (the reason's first words)
            self.limiter.log(
                logging.WARNING,
                ("acl refused", ip, str(e)[:24]),
                "ACL refused request code %d from %s: %s",
                request.code,
                peer,
                e,
            )
            return refusal(request, e)
        return None
