"""python -m rmqha.broker.namesrv [--port 9876] [--host 0.0.0.0]"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from rmqha.broker.namesrv import guard
from rmqha.broker.namesrv.server import NameServer

DEFAULT_PORT = 9876


def _window(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= guard.MAX_SIGNED_WINDOW_S:
        raise argparse.ArgumentTypeError(f"expected whole seconds in 1..{guard.MAX_SIGNED_WINDOW_S}, got {text!r}")
    return int(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rmqha.broker.namesrv", description="RocketMQ 4.x compatible name server"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("NAMESRV_PORT", DEFAULT_PORT)),
        help="TCP port (default: $NAMESRV_PORT or 9876)",
    )
    parser.add_argument("--host", default="0.0.0.0", help="interface to listen on (default 0.0.0.0)")
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--cluster-secret-file",
        default=os.environ.get("CLUSTER_SECRET_FILE") or None,
        help="ours: a file holding the cluster secret; REGISTER_BROKER, UNREGISTER_BROKER, KV "
        "config writes, topic deletes, write-perm changes and config updates must "
        "then be signed with it (the brokers' clusterSecretFile)",
    )
    parser.add_argument(
        "--signed-request-window-seconds",
        type=_window,
        default=guard.SIGNED_WINDOW_S,
        metavar="S",
        help="with a cluster secret: how far the signing time of a timed request "
        "(REGISTER/UNREGISTER_BROKER) may be from this host's clock, either way, before it is "
        f"refused as stale (default {guard.SIGNED_WINDOW_S}, the broker expiry; 1.."
        f"{guard.MAX_SIGNED_WINDOW_S})",
    )
    parser.add_argument(
        "--max-brokers",
        type=int,
        default=guard.MAX_BROKERS,
        help=f"live broker addresses kept at once (default {guard.MAX_BROKERS})",
    )
    parser.add_argument(
        "--max-topics-per-broker",
        type=int,
        default=guard.MAX_TOPICS_PER_BROKER,
        help=f"topic configs one registration may carry (default {guard.MAX_TOPICS_PER_BROKER})",
    )
    parser.add_argument(
        "--max-topic-routes",
        type=int,
        default=guard.MAX_TOPIC_ROUTES,
        help="(topic, broker group) route entries kept in all; a registration that would pass "
        f"it is refused (default {guard.MAX_TOPIC_ROUTES}, about 110 MiB)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stdout, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from twisted.internet import reactor

    secret = None
    if args.cluster_secret_file:
        try:
            secret = guard.read_secret(args.cluster_secret_file)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    server = NameServer(
        reactor,
        cluster_secret=secret,
        max_brokers=args.max_brokers,
        max_topics_per_broker=args.max_topics_per_broker,
        max_topic_routes=args.max_topic_routes,
        signed_window_s=args.signed_request_window_seconds,
    )
    if secret is not None:
        logging.getLogger("rmqha.broker.namesrv").info(
            "signed registration on: route and KV config writes need the cluster secret of %s; timed "
            "signatures within %d s of this clock",
            args.cluster_secret_file,
            args.signed_request_window_seconds,
        )
    server.listen(args.port, args.host)
    reactor.addSystemEventTrigger("before", "shutdown", server.stop)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
