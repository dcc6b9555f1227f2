"""Kill, pause, stop and restart the containers of a docker-backend cluster, with the docker SDK.

    nodes = Nodes("rmqha-dev")                # the compose project: `rmqha-<cluster name>`
    nodes.restart("broker-a-s")               # SIGTERM (clean shutdown), wait, start again
    nodes.kill("broker-a")                    # SIGKILL: no clean shutdown
    with nodes.paused("broker-b-s"): ...      # frozen (cgroup freezer), connections stay open
    nodes.start("broker-a")

Nodes are compose service names: namesrv, toxiproxy, broker-a, broker-a-s, ...
"""
from __future__ import annotations

import contextlib
import time


class NodesError(Exception):
    pass


class Nodes:
    def __init__(self, project: str, client=None):
        import docker
        self.project = project
        self.client = client or docker.from_env(timeout=60)

    def container(self, service: str):
        found = self.client.containers.list(all=True, filters={"label": [
            f"com.docker.compose.project={self.project}", f"com.docker.compose.service={service}"]})
        if not found:
            raise NodesError(f"compose project {self.project} has no container for service {service!r}")
        return found[0]

    def services(self) -> list[str]:
        cs = self.client.containers.list(all=True, filters={"label": f"com.docker.compose.project={self.project}"})
        return sorted(c.labels.get("com.docker.compose.service") for c in cs)

    def status(self, service: str) -> str:
        """created, running, paused, restarting, exited, dead."""
        c = self.container(service)
        c.reload()
        return c.status

    def kill(self, service: str, signal: str = "SIGKILL") -> None:
        self.container(service).kill(signal=signal)
        if signal in ("SIGKILL", "KILL", 9):
            self.wait_status(service, ("exited", "dead"))

    def stop(self, service: str, timeout: int = 10) -> None:
        """SIGTERM (the broker shuts down cleanly), SIGKILL after `timeout` seconds."""
        self.container(service).stop(timeout=timeout)

    def start(self, service: str) -> None:
        self.container(service).start()
        self.wait_status(service, ("running",))

    def restart(self, service: str, timeout: int = 10) -> None:
        self.container(service).restart(timeout=timeout)
        self.wait_status(service, ("running",))

    def pause(self, service: str) -> None:
        self.container(service).pause()

    def unpause(self, service: str) -> None:
        self.container(service).unpause()

    @contextlib.contextmanager
    def paused(self, service: str):
        self.pause(service)
        try:
            yield
        finally:
            self.unpause(service)

    def wait_status(self, service: str, wanted: tuple[str, ...], deadline_s: float = 30.0) -> str:
        end = time.monotonic() + deadline_s
        while True:
            st = self.status(service)
            if st in wanted:
                return st
            if time.monotonic() > end:
                raise NodesError(f"{self.project}/{service} is {st}, not {'/'.join(wanted)}, after {deadline_s:.0f}s")
            time.sleep(0.1)

    def logs(self, service: str, tail: int | str = "all") -> str:
        return self.container(service).logs(tail=tail).decode("utf-8", "replace")
