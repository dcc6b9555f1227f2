"""A transactional producer for the integration tests, on the project's own remoting codec.

PyPI rocketmq 0.4.4 (C++ client 1.0.1) has no transactional producer in its Python API: its
librocketmq.so contains the C++ class rocketmq::TransactionMQProducer but exports no C function for it,
and rocketmq/client.py offers only Producer, PushConsumer and PullConsumer. (The second client,
clients/rust, has its own: `tx-send`, test_rust_client_transactions.py.) So the producer side here
speaks the protocol itself, the way RocketMQ 4.9.8's Java TransactionMQProducer does
(DefaultMQProducerImpl.sendMessageInTransaction, endTransaction and checkTransactionState):

* HEART_BEAT naming the producer group, so the broker can send it CHECK_TRANSACTION_STATE;
* the half message: SEND_MESSAGE with TRAN_MSG=true, PGROUP=<group>, a UNIQ_KEY and the PREPARED sysflag;
* END_TRANSACTION, oneway: commitLogOffset from the reply's offsetMsgId, tranStateTableOffset = the
  reply's queueOffset, msgId = the UNIQ_KEY, commitOrRollback 8 (COMMIT), 12 (ROLLBACK) or 0 (UNKNOW);
* a CHECK_TRANSACTION_STATE is answered by END_TRANSACTION (oneway, fromTransactionCheck=true) about the
  copy it names, with the state the test's `check` callback returns for the decoded message.

Blocking, one connection, no threads: the test calls serve_checks() while it waits.
"""

from __future__ import annotations

import json
import socket
import time
import uuid

from rmqha.broker.remoting.codec import FrameDecoder, encode
from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record

COMMIT, ROLLBACK, UNKNOW = 8, 12, 0


class TxProducer:
    def __init__(self, broker_addr: str, group: str, timeout: float = 5.0):
        host, _, port = broker_addr.rpartition(":")
        self.group = group
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.decoder = FrameDecoder()
        self.opaque = 0
        self.checks: list[RemotingCommand] = []  # every CHECK_TRANSACTION_STATE received
        self.client_id = f"127.0.0.1@tx-{uuid.uuid4().hex[:6]}"
        self._pending_requests: list[RemotingCommand] = []  # broker -> client requests read meanwhile

    def close(self) -> None:
        self.sock.close()

    # -- frames ----------------------------------------------------------------------------------
    def _send(self, cmd: RemotingCommand, oneway: bool = False) -> int:
        self.opaque += 1
        cmd.opaque = self.opaque
        cmd.language = "JAVA"
        if oneway:
            cmd.mark_oneway()
        self.sock.sendall(encode(cmd))
        return cmd.opaque

    def _frames(self, timeout: float):
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return []
        if not data:
            raise ConnectionError("the broker closed the connection")
        return list(self.decoder.feed(data))

    def _call(self, cmd: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
        opaque = self._send(cmd)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for frame in self._frames(max(0.01, deadline - time.monotonic())):
                if frame.is_response and frame.opaque == opaque:
                    return frame
                if not frame.is_response:
                    self._pending_requests.append(frame)
        raise TimeoutError(f"no reply to request code {cmd.code}")

    # -- the producer ----------------------------------------------------------------------------
    def heartbeat(self) -> None:
        body = {"clientID": self.client_id, "producerDataSet": [{"groupName": self.group}], "consumerDataSet": []}
        reply = self._call(RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(body).encode()))
        assert reply.code == 0, reply

    def send_half(self, topic: str, body: str, tags: str = "tx", keys: str = "") -> tuple[str, RemotingCommand]:
        """(UNIQ_KEY, the broker's reply) for one half message."""
        uniq = uuid.uuid4().hex.upper()
        props = {
            "TAGS": tags,
            "KEYS": keys or uniq,
            "UNIQ_KEY": uniq,
            "WAIT": "true",
            "TRAN_MSG": "true",
            "PGROUP": self.group,
        }
        fields = {
            "producerGroup": self.group,
            "topic": topic,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4,
            "queueId": 0,
            "sysFlag": record.TRANSACTION_PREPARED,
            "bornTimestamp": int(time.time() * 1000),
            "flag": 0,
            "properties": record.encode_properties(props),
            "reconsumeTimes": 0,
            "unitMode": "false",
            "batch": "false",
        }
        reply = self._call(RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body=body.encode()))
        return uniq, reply

    def end(self, uniq: str, reply: RemotingCommand, state: int) -> None:
        """END_TRANSACTION after the local transaction, oneway (DefaultMQProducerImpl.endTransaction)."""
        _host, commit_log_offset = record.parse_offset_msg_id(reply.ext_fields["msgId"])
        self._send(
            RemotingCommand.request(
                RequestCode.END_TRANSACTION,
                {
                    "producerGroup": self.group,
                    "tranStateTableOffset": reply.ext_fields["queueOffset"],
                    "commitLogOffset": commit_log_offset,
                    "commitOrRollback": state,
                    "fromTransactionCheck": "false",
                    "msgId": uniq,
                },
            ),
            oneway=True,
        )

    def serve_checks(self, check, until, deadline_s: float) -> None:
        """Answer CHECK_TRANSACTION_STATE with check(message) until until() is true or the deadline."""
        end = time.monotonic() + deadline_s
        while not until():
            if time.monotonic() > end:
                raise TimeoutError(f"no expected check-back within {deadline_s} s (got {len(self.checks)})")
            frames, self._pending_requests = self._pending_requests + self._frames(0.2), []
            for frame in frames:
                if frame.code == RequestCode.CHECK_TRANSACTION_STATE and not frame.is_response:
                    self.checks.append(frame)
                    self._answer(frame, check(record.scan(frame.body).message))

    def _answer(self, request: RemotingCommand, state: int) -> None:
        f = request.ext_fields
        message = record.scan(request.body).message
        self._send(
            RemotingCommand.request(
                RequestCode.END_TRANSACTION,
                {
                    "producerGroup": self.group,
                    "tranStateTableOffset": f["tranStateTableOffset"],
                    "commitLogOffset": f["commitLogOffset"],
                    "commitOrRollback": state,
                    "fromTransactionCheck": "true",
                    "msgId": message.properties.get("UNIQ_KEY", f.get("offsetMsgId", "")),
                    "transactionId": f.get("transactionId", ""),
                },
            ),
            oneway=True,
        )
