"""Transactional messages, as RocketMQ 4.9.8 stores and checks them (the broker's
transaction/queue/ package, EndTransactionProcessor and Broker2Client.checkProducerTransactionState).

Everything travels through the commit log, so a slave holds the same bytes as its master:

1. A SEND whose properties say TRAN_MSG=true (Boolean.parseBoolean) is a *half message*: it is stored
   in RMQ_SYS_TRANS_HALF_TOPIC queue 0, with REAL_TOPIC and REAL_QID saying where it was going and its
   transaction sysflag bits cleared (`messages.to_half`), so no consumer of the real topic sees it. The
   reply is the ordinary send reply: msgId = the half record's offsetMsgId, queueOffset = its offset in
   the half queue, queueId = the real queue (the 4.9.8 send path sets no transactionId; the client
   takes the transaction id from the message's UNIQ_KEY).
2. END_TRANSACTION (37) names the half by commitLogOffset and tranStateTableOffset. COMMIT stores a
   copy in REAL_TOPIC/REAL_QID with the COMMIT sysflag (`messages.committed`), then an *op message*;
   ROLLBACK stores only the op message. An op message is RMQ_SYS_TRANS_OP_HALF_TOPIC, the half's queue
   id, tag "d", body = the half's queue offset in decimal (`messages.op_message`).
3. On a master, every transactionCheckInterval, the check (`check.check_queue`) walks the half queue
   from its consumer offset under the group CID_RMQ_SYS_TRANS, skipping halves an op message names;
   a half older than transactionTimeOut is stored again at the end of the half queue with
   TRANSACTION_CHECK_TIMES + 1 and CHECK_TRANSACTION_STATE (39, oneway) goes to a live producer
   connection of its PGROUP; after transactionCheckMax checks the half is moved to
   TRANS_CHECK_MAX_TIME_TOPIC instead. Progress is the consumer offsets of the half and op queues
   under CID_RMQ_SYS_TRANS (copied to slaves with the other consumer offsets).

Modules: `messages` (the records, pure functions), `bridge` (the store reads and writes), `check` (the
check walk), `service` (commit/rollback, the periodic check and the check-back). END_TRANSACTION's
processor is rmqha/broker/processors/end_transaction.py.
"""
