"""python -m rmqha.broker -c broker-a.properties [--set key=value ...]

The broker's process entry. With plantBug= (tests of the audit only) it also installs the controls that
setting names into the broker's seams (rmqha/broker/support/seams.py), loading them by name."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from rmqha.broker.config.properties import BrokerConfig, ConfigError
from rmqha.broker.support.seams import CONTROLS_INSTALLER, Seams
from .store.mapped_file import StoreError


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stdout,
    )
    from twisted.python import log as twisted_log

    twisted_log.PythonLoggingObserver(loggerName="twisted").start()


def controls_for(config: BrokerConfig) -> Seams:
    """The seams with the controls plantBug= names installed (tests of the audit only), else the no-op ones.

    The installer is looked up by its name (CONTROLS_INSTALLER) and only here, only when plantBug is set:
    rmqha.broker imports no control (an import contract in pyproject.toml enforces it)."""
    if not config.plantBug:
        return Seams()
    installer = importlib.import_module(CONTROLS_INSTALLER)
    try:
        return installer.seams_for(config.plantBug)
    except ValueError as e:  # unknown names: the message names the known ones
        raise ConfigError(f"plantBug={config.plantBug!r}: {e}") from None


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
        seams = controls_for(config)
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

    server = BrokerServer(config, reactor, seams=seams)
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
