"""python -m rmqha.broker -c broker-a.properties [--set key=value ...]"""

from __future__ import annotations

import argparse
import logging
import sys

from rmqha.broker.config.properties import BrokerConfig, ConfigError
from .store.mapped_file import StoreError


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stdout,
    )
    from twisted.python import log as twisted_log

    twisted_log.PythonLoggingObserver(loggerName="twisted").start()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rmqha.broker", description="RocketMQ 4.x-compatible broker")
    ap.add_argument("-c", "--config", required=True, help="an official RocketMQ broker.properties file")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override one config key (repeatable)"
    )
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument("--check", action="store_true", help="validate the config, print it, and exit")
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    try:
        config = BrokerConfig.load(args.config, overrides)
    except ConfigError as e:
        print(f"config error in {args.config}: {e}", file=sys.stderr)
        return 2
    if args.check:
        for k, v in sorted(vars(config).items()):
            if k == "ignored_keys":
                continue
            print(f"{k}={str(v).lower() if isinstance(v, bool) else ('' if v is None else v)}")
        for k in config.ignored_keys:
            print(f"# a 4.9 key this broker accepts and does not use: {k}")
        print(
            f"# derived: haListenPort={config.ha_port} metricsPort={config.metrics_port} "
            f"addr={config.broker_addr} haServerAddr={config.ha_server_addr}"
        )
        return 0
    setup_logging(args.log_level)
    from twisted.internet import reactor
    from twisted.internet.error import CannotListenError

    from .server import BrokerServer

    server = BrokerServer(config, reactor)
    try:
        server.start()
    except ConfigError as e:  # a file the configuration names (plain_acl.yml) is not usable
        logging.getLogger("rmqha.broker").error("cannot start: %s", e)
        return 2
    except StoreError as e:
        logging.getLogger("rmqha.broker").error("cannot start: %s", e)
        return 3
    except (OSError, CannotListenError) as e:
        logging.getLogger("rmqha.broker").error(
            "cannot start: %s (is another broker using the same ports? set listenPort, or haListenPort/metricsPort)", e
        )
        return 3
    reactor.addSystemEventTrigger("before", "shutdown", server.stop)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
