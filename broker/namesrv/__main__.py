"""python -m broker.namesrv [--port 9876] [--host 0.0.0.0]"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from broker.namesrv.server import NameServer

DEFAULT_PORT = 9876


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m broker.namesrv",
                                     description="RocketMQ 4.x compatible name server")
    parser.add_argument("--port", type=int, default=int(os.environ.get("NAMESRV_PORT", DEFAULT_PORT)),
                        help="TCP port (default: $NAMESRV_PORT or 9876)")
    parser.add_argument("--host", default="0.0.0.0", help="interface to listen on (default 0.0.0.0)")
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from twisted.internet import reactor

    server = NameServer(reactor)
    server.listen(args.port, args.host)
    reactor.addSystemEventTrigger("before", "shutdown", server.stop)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
