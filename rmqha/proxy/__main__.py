"""python -m rmqha.proxy --namesrv host:port[;host:port] --listen host:port

The 5.x gRPC proxy in cluster mode, as its own process (the local backend and the compose files start it)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from rmqha.proxy import convert
from rmqha.proxy.service import Proxy, serve


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m rmqha.proxy", description=__doc__)
    ap.add_argument("--namesrv", required=True, help="name server addresses, ';'-separated")
    ap.add_argument("--listen", default="0.0.0.0:8081", help="gRPC address (5.x's grpcServerPort is 8081)")
    ap.add_argument(
        "--broker-host-map",
        default="",
        help="HOST=OTHER[,...]: reach brokers registered with HOST at OTHER (compose: 127.0.0.1=toxiproxy)",
    )
    ap.add_argument("--delay-levels", default=convert.DEFAULT_DELAY_LEVELS, help="the brokers' messageDelayLevel")
    ap.add_argument(
        "--min-invisible-ms", type=int, default=10_000, help="ReceiveMessage's shortest invisible duration (5.x: 10 s)"
    )
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(_run(args))


async def _run(args) -> None:
    host_map = dict(x.split("=", 1) for x in args.broker_host_map.split(",") if "=" in x)
    proxy = Proxy([a for a in args.namesrv.split(";") if a], host_map, args.delay_levels, args.min_invisible_ms)
    server = await serve(args.listen, proxy)
    logging.getLogger("rmqha.proxy").info("proxy listening on %s, name servers %s", args.listen, proxy.namesrv)
    beats = asyncio.ensure_future(proxy.heartbeat_loop())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    beats.cancel()
    await server.stop(1)
    proxy.remoting.close()


if __name__ == "__main__":
    main()
