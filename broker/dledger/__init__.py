"""DLedger, RocketMQ 4.5-4.9's Raft-based replication (issue 26): the IO-free core.

It follows openmessaging/dledger 0.3.1.2, the version RocketMQ 4.9.8 ships (its pom's dleger.version),
read from the tag dledger-all-0.3.1.2. No sockets, no Twisted, no wall clock: time (ms) is passed in,
randomness comes from a seeded random.Random, and every input returns a list of effects.

What exists:

* entry.py: the data entry (magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodySize,
  body; BODY_OFFSET 48) and the 32-byte index entry, byte for byte as DLedgerEntryCoder, the
  blank that pads a data file, and clear errors on bad bytes. In RocketMQ the body is one 4.x
  message, whose commit-log offset is the entry's pos + 48.
* protocol.py: request codes (VOTE 51001, HEART_BEAT 51002, PUSH 51004, APPEND 50001,
  LEADERSHIP_TRANSFER 51005, ...), response codes, and the JSON bodies as dataclasses with
  DLedger's (fastjson's) field names.
* config.py: DLedgerConfig's defaults (heartBeatTimeIntervalMs 2000, maxHeartBeatLeak 3,
  minVoteIntervalMs 300, maxVoteIntervalMs 1000, maxWaitAckTimeMs 2500, ...), and `Rules`:
  where this core departs from 0.3.1.2, each switchable back (`Rules.dledger_0312()`).
* election.py: MemberState and the elector (roles, terms, votes with DLedger's accept/reject
  reasons, heartbeats and maxHeartBeatLeak, randomized vote intervals, leadership transfer).
* replication.py: the leader's per-follower push state (COMPARE / TRUNCATE / APPEND / COMMIT),
  watermarks and the quorum committed index, the follower's handling of pushes, and MemoryLog,
  the log interface a file store will implement.
* node.py: DLedgerNode, DLedgerServer's routing over the three; effects.py: what it asks for
  (Send, Reply, PersistTerm, RoleChanged, Committed, AppendDone).

tests/unit/dledger holds the byte-layout tests, one test per vote and push rule, and a Raft property
test: simulated 3- and 5-node groups with a lossy, duplicating, reordering network, partitions and
crash/restarts, thousands of seeded schedules checked for election safety, log matching, leader
completeness and state-machine safety, with planted bugs that the checker catches, and liveness
once the network heals.

What is next, in order:

1. The file store: DLedgerMmapFileStore's data and index files (mapped file size, blanks at a
   file's end, recovery that checks data against index and truncates a torn tail, the checkpoint
   file with committedIndex, the `currterm` file with currTerm and voteLeader), implementing
   MemoryLog's interface, with a fsync policy stated against the property test's assumption that
   an acknowledged append survives a crash.
2. The Twisted transport: DLedger's RPC as RocketMQ remoting commands (code = RequestCode, JSON
   body), one listener per node, NETWORK_ERROR answers after the 3 s timeout, driving DLedgerNode
   with ticks every 10 ms; PersistTerm written before the Sends and Replies after it.
3. The broker's role switch (DLedgerCommitLog, DLedgerRoleChangeHandler): enableDLegerCommitLog,
   dLegerGroup, dLegerPeers, dLegerSelfId; the leader is brokerId 0 once its committed index
   reaches its end (4.9.8 waits for that; with the Raft commit rule a new leader must first commit
   an entry of its own term, so the broker appends one, or the rule is switched back), followers
   are slaves; re-registration on a role change; the smooth upgrade from a classic commit log.
4. The `dledger` topology (three nodes, one broker name) on both backends, the status table,
   the pytest plugin, and the kit's DLedger faults and matrix rows.
"""
