"""POP consumption as RocketMQ 5.x serves it over remoting (POP_MESSAGE 200050, ACK_MESSAGE 200051,
CHANGE_MESSAGE_INVISIBLETIME 200053), for the 5.x gRPC proxy (rmqha/proxy).

checkpoint.py  the formats: a checkpoint (CK) and an ack as revive-topic records, POP_CK's extra info
revive.py      the IO-free revive table: checkpoints, their acks, which are due, the safe revive offset
service.py     the broker side: pop from a queue, store CK/ACK records, revive what was not acked
               (tests: tests/unit/processors/test_pop.py)

Everything that makes ack state is an ordinary commit-log record in the revive topic
rmq_sys_REVIVE_LOG_<brokerClusterName>, so the classic HA (or DLedger's log) replicates it like any
message; the pop position is the group's consumer offset and the revive position the REVIVE group's, both
in consumerOffset.json (which slaves copy), as in 5.x. In DLedger mode the revive service runs on the
leader: rmqha/broker/dledger/role_handler.py starts and stops it with the role.
"""
