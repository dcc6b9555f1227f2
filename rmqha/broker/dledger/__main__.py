"""Run one DLedger node: `python -m rmqha.broker.dledger --group g --peers "n0-127.0.0.1:40911;n1-..." --self-id n0
--store-dir /tmp/dl [--status-port 8080]`.

Serves DLedger's RPC on its own address from --peers, logs role changes, and (with --status-port)
answers GET /status with the node's JSON status. Timers may be scaled for tests (--timer-scale 0.5).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import signal
import sys

from .config import DLedgerConfig
from .file_store import DEFAULT_DATA_FILE_SIZE, DEFAULT_INDEX_FILE_SIZE, FileStore
from .node import DLedgerNode
from .transport import DLedgerService

TIMERS = (
    "heartBeatTimeIntervalMs",
    "minVoteIntervalMs",
    "maxVoteIntervalMs",
    "maxWaitAckTimeMs",
    "maxPushTimeOutMs",
    "rpcTimeoutMs",
    "voteWaitBaseMs",
    "commitPushIntervalMs",
    "leakCheckIntervalMs",
    "pushFutureTimeoutMs",
    "errorBackoffMs",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rmqha.broker.dledger", description=__doc__.splitlines()[0])
    p.add_argument("--group", required=True)
    p.add_argument("--peers", required=True, help='"n0-host:port;n1-host:port;..."')
    p.add_argument("--self-id", required=True)
    p.add_argument("--store-dir", required=True, help="storeBaseDir: files go to <dir>/dledger-<selfId>")
    p.add_argument("--status-port", type=int, default=0, help="serve GET /status on 127.0.0.1 (0: off)")
    p.add_argument("--data-file-size", type=int, default=DEFAULT_DATA_FILE_SIZE)
    p.add_argument("--index-file-size", type=int, default=DEFAULT_INDEX_FILE_SIZE)
    p.add_argument("--sync-every-append", action="store_true", help="fsync before acknowledging")
    p.add_argument("--timer-scale", type=float, default=1.0, help="multiply DLedger's timers (tests)")
    p.add_argument("--preferred-leader", default=None, help="preferredLeaderIds")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--cluster-secret-file", default=None, help="sign peer traffic and refuse unsigned requests (clusterSecretFile)"
    )
    return p.parse_args(argv)


def make_config(args: argparse.Namespace) -> DLedgerConfig:
    c = DLedgerConfig(group=args.group, selfId=args.self_id, peers=args.peers, acceptRemoteAppend=True)
    if args.self_id not in c.peer_map():
        raise SystemExit(f"--self-id {args.self_id} is not in --peers {args.peers}")
    if args.timer_scale != 1.0:
        for name in TIMERS:
            setattr(c, name, max(1, int(getattr(c, name) * args.timer_scale)))
    c.preferredLeaderIds = args.preferred_leader
    if args.cluster_secret_file:
        from rmqha.broker.namesrv.guard import read_secret

        try:
            c.clusterSecret = read_secret(args.cluster_secret_file)
        except ValueError as e:
            raise SystemExit(f"--cluster-secret-file: {e}") from None
    return c


def main(argv: list[str] | None = None) -> None:
    from twisted.internet import reactor
    from twisted.web import resource, server

    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format=f"%(asctime)s {args.self_id} %(levelname)s %(message)s"
    )
    config = make_config(args)
    store = FileStore(
        args.store_dir,
        args.self_id,
        data_file_size=args.data_file_size,
        index_file_size=args.index_file_size,
        sync_every_append=args.sync_every_append,
    )
    term, vote_for = store.load_term()
    logging.info(
        "recovered %s: entries %d..%d (term %d), committed %d, currTerm %d, voteLeader %s",
        store.path,
        store.begin_index,
        store.end_index,
        store.end_term,
        store.committed_index,
        term,
        vote_for,
    )
    node = DLedgerNode(config, store, rng=random.Random(args.seed), term=term, vote_for=vote_for)
    service = DLedgerService(node, store, reactor=reactor)
    service.start()

    if args.status_port:

        class Status(resource.Resource):
            isLeaf = True

            def render_GET(self, request):  # noqa: N802 (twisted's name)
                request.setHeader(b"content-type", b"application/json")
                return json.dumps(service.status()).encode()

        reactor.listenTCP(args.status_port, server.Site(Status()), interface="127.0.0.1")

    def shutdown(*_a):
        reactor.callFromThread(reactor.stop)

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    reactor.addSystemEventTrigger("before", "shutdown", service.stop)
    logging.info(
        "listening on %s%s", config.peer_map()[args.self_id], " (signed peer traffic)" if config.clusterSecret else ""
    )
    reactor.run(installSignalHandlers=False)


if __name__ == "__main__":
    main()
