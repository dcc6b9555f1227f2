"""DLedger, RocketMQ 4.5-4.9's Raft-based replication (issue 26): an IO-free core, its file store and
a Twisted driver.

It follows openmessaging/dledger 0.3.1.2, the version RocketMQ 4.9.8 ships (its pom's dleger.version),
read from the tag dledger-all-0.3.1.2. The core has no sockets, no Twisted, no wall clock: time (ms) is
passed in, randomness comes from a seeded random.Random, and every input returns a list of effects;
transport.py carries them out.

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
  reasons, heartbeats and maxHeartBeatLeak, randomized vote intervals, leadership transfer, the
  peersLiveTable). node.py also runs checkPreferredLeader: once a second a leader that is not in
  preferredLeaderIds hands over to the live preferred peer least behind, if less than
  maxLeadershipTransferWaitIndex behind (docs/dledger.md "Leadership transfer to preferredLeaderId").
* replication.py: the leader's per-follower push state (COMPARE / TRUNCATE / APPEND / COMMIT),
  watermarks and the quorum committed index, the follower's handling of pushes, and MemoryLog,
  the log interface a file store will implement.
* node.py: DLedgerNode, DLedgerServer's routing over the three; effects.py: what it asks for
  (Send, Reply, PersistTerm, RoleChanged, Committed, AppendDone).
* file_store.py: FileStore, DLedgerMmapFileStore's files byte for byte (`<storeBaseDir>/dledger-<selfId>/`
  data and index files of mappedFileSizeForEntryData / ...Index, the blank that pads a data file, the
  `checkpoint` and `currterm` properties files) behind MemoryLog's interface; recovery checks data
  against the index and cuts a torn tail; truncation zeroes what it cuts. Durability: every append is
  in the page cache before its ack (a killed process loses nothing acknowledged, the property test's
  crash model); fsync every flushFileInterval as 0.3.1.2 (power loss on a majority can lose the last
  ~10 ms), or before every ack with sync_every_append; `currterm` is fsynced before anything that
  depends on it is sent.
* transport.py: DLedgerService, DLedgerRpcNettyService over RocketMQ remoting (code = DLedger request
  code, JSON body, answers with code 200 and the request's opaque), one listener per node, NETWORK_ERROR
  answers after rpcTimeoutMs or when a connection fails or drops, LoopingCalls (injectable clock) for
  10 ms ticks, flushes and checkpoints; with a cluster secret it signs requests and answers and
  refuses unsigned, stale or replayed requests (signing.py; docs/dledger.md "Signed peer traffic").
  client.py: a blocking one-request client.
  `python -m rmqha.broker.dledger --group g --peers "n0-127.0.0.1:40911;..." --self-id n0 --store-dir D
  [--status-port P]` runs one node, with GET /status (role, term, leader, indexes).

tests/unit/dledger holds the byte-layout tests, one test per vote and push rule, and a Raft property
test: simulated 3- and 5-node groups with a lossy, duplicating, reordering network, partitions and
crash/restarts, thousands of seeded schedules checked for election safety, log matching, leader
completeness and state-machine safety, with planted bugs that the checker catches, and liveness
once the network heals; the same simulator runs on file stores reopened (and recovered) after every
crash. tests/unit/dledger/test_file_store.py checks the files against hand-packed bytes, torn tails,
index rebuilds, truncation and term/vote recovery; test_transport.py the driver on a memory reactor;
tests/integration/test_dledger_processes.py runs three node processes through election, replication,
a leader kill (a new leader in ~2.6 s with the timers halved, ~5.4 s with 0.3.1.2's defaults), the old
leader's return and a follower's catch-up after losing its tail.

The broker on it (rmqha/broker/store/dledger_commitlog.py, docs/dledger.md): enableDLegerCommitLog and the
dLeger* keys, DLedgerCommitLog (one classic record per entry, PHYSICALOFFSET = pos + 48 through the file
store's append hook, dispatch of committed entries only, batch sends as one entry per message with one
quorum wait: EntryPusher.append_batch), the role switch (leader -> master id 0 after its no-op commits,
follower -> slave selfId + 1), the `dledger` topology on the local and docker backends (peer links
through Toxiproxy, one proxy per direction), `cluster up` readiness and the status table's DLedger
columns.

What is next, in order:

1. The kit's DLedger power loss on a majority, disk-full and link-latency faults (kill, pause,
   partition and power loss of the leader or a follower exist: rmqha/chaos/nemesis.py; the matrix has
   DLedger rows).
2. Left out of the file store so far: the clean-space service (file deletion by age and disk ratio,
   also of an upgraded member's old classic files, and so a begin index above 0 that survives a
   restart), multi-path data dirs, batch push, and BatchAppendEntryRequest over RPC (answered
   UNSUPPORTED; the broker's batches are local appends).
"""
