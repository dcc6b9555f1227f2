"""END_TRANSACTION (37): a producer's COMMIT or ROLLBACK of a half message (RocketMQ 4.9.8
EndTransactionProcessor; the work is rmqha/broker/transaction/service.py).

Header (EndTransactionRequestHeader): producerGroup, tranStateTableOffset (Long), commitLogOffset
(Long), commitOrRollback (Integer: 0 NOT_TYPE, 8 COMMIT, 12 ROLLBACK), msgId (required), fromTransactionCheck
(Boolean, optional) and transactionId (optional). In the reference's order:

* a missing or unparsable field, or a commitOrRollback outside {0, 8, 12} ("commitOrRollback field
  wrong"), is the peer's mistake: SYSTEM_ERROR with what was wrong; so is a producer group that is not a
  valid group name (rmqha/broker/support/validation.py; the reference only compares it);
* a SLAVE answers SLAVE_NOT_AVAILABLE and changes nothing;
* NOT_TYPE (the producer does not know yet) is logged and not answered: the check will ask again;
* COMMIT / ROLLBACK: SUCCESS, or SYSTEM_ERROR "Find prepared transaction message failed" / "The producer
  group wrong" / "The transaction state table offset wrong" / "The commit log offset wrong".

Clients send it oneway (the Java client with the oneway flag, so nothing is answered; the C++ client's
flag never reaches the wire, so it gets an answer and drops it).
"""

from __future__ import annotations

import logging

from twisted.internet import defer

from rmqha.broker.support import validation
from rmqha.broker.support.log_limit import LogLimiter
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import HeaderFieldError, RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.transaction import service

log = logging.getLogger("rmqha.broker.transaction")
_limiter = LogLimiter(log)

KINDS = (service.NOT_TYPE, service.COMMIT, service.ROLLBACK)


class EndTransactionProcessor(Processors):
    def __init__(self, config, transactions: service.TransactionService):
        self.config = config
        self.transactions = transactions

    @handles(RequestCode.END_TRANSACTION)
    def process(self, req: RemotingCommand, ctx) -> RemotingCommand | defer.Deferred | None:
        group = req.get_str("producerGroup")
        tran_state_offset = req.get_long("tranStateTableOffset")
        commit_log_offset = req.get_long("commitLogOffset")
        kind = req.get_int("commitOrRollback")
        req.get_str("msgId")
        from_check = req.get_lenient_bool("fromTransactionCheck", False)  # C++ sends "1", Java "true"
        if kind not in KINDS:
            raise HeaderFieldError("commitOrRollback field wrong")
        validation.check_group(group)
        if not self.config.is_master:
            log.warning("END_TRANSACTION from %s refused: this broker is a slave", ctx.peer_address)
            return req.make_response(
                ResponseCode.SLAVE_NOT_AVAILABLE, "this broker is a SLAVE: end the transaction on its master"
            )
        if kind == service.NOT_TYPE:
            _limiter.log(
                logging.INFO,
                ("unknown state", group),
                "producer %s of group %s does not know the state of the transaction at half queue "
                "offset %d yet (%s); the check will ask again",
                ctx.peer_address,
                validation.shown(group),
                tran_state_offset,
                "answering a check" if from_check else "after sending",
            )
            return None
        answer = self.transactions.end_transaction(kind, group, tran_state_offset, commit_log_offset)
        if isinstance(answer, defer.Deferred):  # DLedger mode: a COMMIT once a quorum has the message
            return answer.addCallback(self._answer, req, ctx, kind, group, tran_state_offset, commit_log_offset)
        return self._answer(answer, req, ctx, kind, group, tran_state_offset, commit_log_offset)

    @staticmethod
    def _answer(answer, req, ctx, kind, group, tran_state_offset, commit_log_offset) -> RemotingCommand:
        code, remark = answer
        if code != ResponseCode.SUCCESS:
            _limiter.log(
                logging.WARNING,
                ("end transaction failed", group),
                "END_TRANSACTION %s from %s (group %s, queue offset %d, commit-log offset %d): %s",
                service.KIND_NAMES[kind],
                ctx.peer_address,
                validation.shown(group),
                tran_state_offset,
                commit_log_offset,
                remark,
            )
        return req.make_response(code, remark)
