"""DLedgerConfig's defaults that the IO-free core uses (dledger 0.3.1.2 DLedgerConfig.java); times in ms."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DLedgerConfig:
    group: str = "default"
    selfId: str = "n0"
    peers: str = "n0-localhost:20911"  # "id-host:port;id-host:port"
    heartBeatTimeIntervalMs: int = 2000
    maxHeartBeatLeak: int = 3
    minVoteIntervalMs: int = 300
    maxVoteIntervalMs: int = 1000
    maxPendingRequestsNum: int = 10000
    maxWaitAckTimeMs: int = 2500
    maxPushTimeOutMs: int = 1000
    enableLeaderElector: bool = True
    enablePushToFollower: bool = True
    preferredLeaderIds: str | None = None  # "n1;n2"
    maxLeadershipTransferWaitIndex: int = 1000
    minTakeLeadershipVoteIntervalMs: int = 30
    maxTakeLeadershipVoteIntervalMs: int = 100
    leadershipTransferWaitTimeout: int = 1000
    isEnableBatchPush: bool = False  # batch push is not modelled yet: the core pushes one entry a request
    maxBatchPushSize: int = 4 * 1024
    # Ours: a remote AppendEntryRequest (code 50001) is refused with UNSUPPORTED unless this is on. A
    # RocketMQ broker only appends locally, so on its DLedger port a remote append could only be someone
    # injecting records (review 2, A3); the standalone server (python -m rmqha.broker.dledger) turns it on.
    acceptRemoteAppend: bool = False
    # Ours: with a cluster secret (the broker's clusterSecretFile) peer requests and answers are signed
    # and unsigned ones refused (signing.py); None: 0.3.1.2's traffic, byte for byte.
    clusterSecret: str | None = field(default=None, repr=False)
    signWindowMs: int = 30_000  # how far a signed request's time may be from the receiver's clock
    # Not DLedger settings, the blocking waits its threads make, here as deadlines:
    rpcTimeoutMs: int = 3000  # the remoting invokeAsync timeout; also how long COMPARE/TRUNCATE wait
    voteWaitBaseMs: int = 2000  # a vote round waits 2000 + random(maxVoteIntervalMs) for its latch
    commitPushIntervalMs: int = 1000  # doCommit: a pure COMMIT push when nothing was pushed for 1 s
    leakCheckIntervalMs: int = 1000  # QuorumAckChecker / EntryHandler once-a-second checks
    pushFutureTimeoutMs: int = 1000  # the follower's TimeoutFuture for a buffered push
    maxPendingSize: int = 1000  # EntryDispatcher.maxPendingSize (in-flight appends per follower)
    errorBackoffMs: int = 500  # a dispatcher's sleep after an error (a failed compare or truncate)

    @classmethod
    def from_broker(cls, config) -> "DLedgerConfig":
        """The DLedger config of a broker's keys (4.9.8 DLedgerCommitLog: dLegerGroup, dLegerSelfId,
        dLegerPeers, preferredLeaderId, which 4.9 sets as DLedger's preferredLeaderIds, a ;-list), and
        ours: the secret of clusterSecretFile, read now (a ValueError says what is wrong)."""
        secret = None
        if getattr(config, "clusterSecretFile", ""):
            from rmqha.broker.namesrv.guard import read_secret

            secret = read_secret(config.clusterSecretFile)
        return cls(
            group=config.dLegerGroup,
            selfId=config.dLegerSelfId,
            peers=config.dLegerPeers,
            preferredLeaderIds=config.preferredLeaderId or None,
            clusterSecret=secret,
        )

    def peer_map(self) -> dict[str, str]:
        out = {}
        for info in self.peers.split(";"):
            peer_id = info.split("-")[0]
            out[peer_id] = info[len(peer_id) + 1 :]
        return out

    def preferred_leaders(self) -> list[str]:
        return self.preferredLeaderIds.split(";") if self.preferredLeaderIds else []


@dataclass
class Rules:
    """Where this core departs from dledger 0.3.1.2, each switchable back (see replication.py's
    docstring for the four replication rules). leader_steps_down_on_larger_term is dledger 0.3.2's
    fix #247 (a leader that hears of a larger term steps down even with a quorum of heartbeats; in
    0.3.1.2 a follower that raised its term while cut off and is behind stays a candidate for as
    long as that leader lives: openmessaging/dledger issue #325, seen with RocketMQ 4.9.3).
    """

    commit_rule: str = "raft"  # or "dledger"
    follower_compare_checks_term: bool = True
    follower_commit_needs_term: bool = True
    fresh_compare_per_term: bool = True
    leader_steps_down_on_larger_term: bool = True
    # A follower refuses a TRUNCATE that would cut entries of the request's own term: only a stale
    # (reordered or duplicated) TRUNCATE can, and it would cut entries the leader has counted. DLedger
    # relies on TCP's order and its leader waiting for each TRUNCATE; this core does not.
    follower_truncate_keeps_own_term: bool = True

    @classmethod
    def dledger_0312(cls) -> "Rules":
        """Exactly 0.3.1.2's behaviour."""
        return cls("dledger", False, False, False, False, False)
