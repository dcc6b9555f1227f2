"""The docker backend: one compose project per cluster, from compose/docker-compose.<topology>.yml.

What it starts (project `rmqha-<cluster name>`, on compose's own bridge network `rmqha-<name>_default`):
  namesrv     rmqha/broker running `python3 -m rmqha.broker.namesrv`, published on 127.0.0.1:<name server port>
  toxiproxy   rmqha/toxiproxy, API published on 127.0.0.1:<toxiproxy port>, with the proxies below
  broker-*    rmqha/broker, one per conf file of the topology (mounted read-only), store on the host

Apache RocketMQ 4.9.x (--broker apache, ROCKETMQ_HOME): its brokers and (by default) its name server run
the image built from that distribution (rmqha/cluster/implementations/apache_image.py, `images/build.sh
apache`): 4.9's mqbroker on RUN_DIR/nodes/<node>/broker.properties (the keys ours is given, written by
implementations/apache.py), the node's folder mounted as its user.home, where 4.9 logs. Everything else is
as for ours: the same proxies and addresses, stores and faults. The port published as the metrics port
P+2 leads to such a broker's listen port P instead (no metrics there), so its status (GET_BROKER_RUNTIME_INFO,
GET_BROKER_CONFIG: implementations/runtime_status.py) never crosses a proxy either; the HA connections
it holds are read from its JVM's /proc entries on this machine. Each broker service's image, command and
that port are compose variables (<NODE>_IMAGE, <NODE>_COMMAND, <NODE>_OBSERVED), the name server's
RMQHA_NAMESRV_IMAGE and RMQHA_NAMESRV_COMMAND.

rocketmq-rust's broker (--broker rust) runs the same way on the image made from the binary `make
peer-broker` built (implementations/rust_image.py, `images/build.sh rust`): on RUN_DIR/nodes/<node>/broker.toml
(implementations/rust.py), the port P+2 published to its listen port, its HA connections read from its
process's /proc entries; the name server is ours.

Addressing. Node i gets the local backend's port plan: listenPort P = base + 10*i, HA P+1, metrics P+2.
  - client port: the broker listens on P in its container and registers brokerIP1=127.0.0.1, so the
    name server returns 127.0.0.1:P. Toxiproxy listens on P in *its* container (proxy `<node>`,
    upstream <node>:P) and compose publishes 127.0.0.1:P to it, so a host client's connection to
    127.0.0.1:P goes host -> toxiproxy -> broker;
  - VIP channel: every broker also listens on P-2 (4.9's fastListenPort). Proxy `<node>-vip` listens
    on toxiproxy:P-2 (upstream <node>:P-2), published as 127.0.0.1:P-2, for host clients with
    vipChannelEnabled=true; a 4.9 slave in a container dials its master's P-2 directly. The client
    faults (client-cut, client-latency) act on `<node>` only: the kit's clients keep vipChannelEnabled
    at its default, false (4.9.8 and rocketmq-client-rust alike);
  - HA: the master listens on P+1 (not published). Each slave has a proxy `<slave>-ha` listening on
    toxiproxy:<master's P+1> with upstream <master>:P+1, and the slave's haMasterAddress is
    toxiproxy:<master's P+1>. brokerIP2 (the address a master registers for HA) is its service name;
  - metrics and /status (P+2) are published directly (127.0.0.1:P+2), so observing never crosses a
    proxy that a test has broken;
  - DLedger (topology `dledger`): node B listens on 0.0.0.0:<B's P+3> in its container; node A's
    dLegerPeers names B as toxiproxy:<B's P + 4 + A's index>, proxy `<A>-dl-<B>` (kind "dledger",
    upstream B:<B's P+3>). One proxy per direction of each peer link, none published: cutting
    `<A>-dl-<B>` and `<B>-dl-<A>` partitions the pair (an RPC's answer rides its request's connection);
  - Toxiproxy's API: 8474 for the default cluster (base 10911), base+48 otherwise.

Stores: RUN_DIR/nodes/<node>/store is bind-mounted at /var/lib/rocketmq/store, and the containers run
with the caller's uid:gid, so the audit pipeline reads the commit logs in place and `down` can delete
them. Commit-log files are preallocated (fallocate), so this backend defaults mappedFileSizeCommitLog to
64 MiB (RocketMQ's 1 GiB default would reserve 4 GiB for a 2m-2s cluster); --set overrides it.

The compose variables are written to RUN_DIR/compose.env (and passed in the environment), the proxy
list to RUN_DIR/toxiproxy.json (Toxiproxy's -config file). Logs are the containers' (docker logs);
`down` saves them to RUN_DIR/nodes/<node>/broker.log, RUN_DIR/namesrv/namesrv.log and
RUN_DIR/toxiproxy/toxiproxy.log before removing the containers.

Compose: the standalone `docker-compose` (1.x) or the `docker compose` plugin, whichever is installed
(COMPOSE="..." overrides). Container state and logs come from the docker SDK.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


from . import ClusterError
from . import acl
from . import runfolder as rf
from .backend import Backend, ProcessState, UpOptions, node_record, state_head
from .implementations import BrokerChoice, apache, apache_image, rust, rust_image
from .process import pid_alive
from .docker_links import CONTAINER_STORE, proxies_and_configs, proxy5_link, toxiproxy_proxies
from .local_backend import check_ports
from .topology import (
    COMPOSE_DIR,
    DEFAULT_BASE_PORT,
    PortPlan,
    Topology,
    node_overrides,
    set_args,
)

BROKER_IMAGE = os.environ.get("RMQHA_BROKER_IMAGE") or "rmqha/broker:latest"
TOXIPROXY_IMAGE = os.environ.get("RMQHA_TOXIPROXY_IMAGE") or "rmqha/toxiproxy:latest"
NAMESRV_CONTAINER_PORT = 9876
OURS_BROKER_COMMAND = "python3 -m rmqha.broker -c /etc/rocketmq/broker.properties"
OURS_NAMESRV_COMMAND = f"python3 -m rmqha.broker.namesrv --port {NAMESRV_CONTAINER_PORT}"
TOXIPROXY_API_DEFAULT = 8474
TOXIPROXY_API_OFFSET = 46  # inside the cluster's port block (PortPlan.block), below the name server
DEFAULT_COMMITLOG_FILE = str(64 * 1024 * 1024)
PROJECT_PREFIX = "rmqha-"


def compose_file(topology: str) -> Path:
    return COMPOSE_DIR / f"docker-compose.{topology}.yml"


def project_name(cluster: str) -> str:
    # compose v1 lower-cases and drops characters other than [a-z0-9_-]
    return PROJECT_PREFIX + "".join(ch for ch in cluster.lower() if ch.isalnum() or ch in "_-")


def env_var(node: str) -> str:
    return node.upper().replace("-", "_")


def toxiproxy_api_port(plan: PortPlan) -> int:
    return TOXIPROXY_API_DEFAULT if plan.base_port == DEFAULT_BASE_PORT else plan.base_port + TOXIPROXY_API_OFFSET


def compose_command() -> list[str]:
    """The compose CLI: $COMPOSE, else `docker-compose`, else `docker compose`."""
    if os.environ.get("COMPOSE"):
        return shlex.split(os.environ["COMPOSE"])
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    raise ClusterError(
        "neither `docker-compose` nor the `docker compose` plugin is installed: "
        "apt-get install docker-compose (or set COMPOSE=...), or use --backend local"
    )


def docker_client():
    try:
        import docker
    except ImportError as e:
        raise ClusterError(
            "the docker backend needs the docker SDK: pip install docker (it is in the dev dependencies: make venv)"
        ) from e
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as e:  # docker.errors.DockerException and connection errors
        raise ClusterError(
            f"the Docker engine does not answer ({e}): start it and check `docker info`, or use --backend local"
        ) from None
    return client


def check_images(client, images: list[str]) -> None:
    import docker

    missing = []
    for image in images:
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            missing.append(image)
    if missing:
        raise ClusterError(
            f"image(s) {', '.join(missing)} not built yet: run `make images` "
            "(images/build.sh; no registry is needed), then `up` again"
        )


def implementation_images(client, choice: BrokerChoice) -> dict[str, str]:
    """The image of each implementation the cluster runs (ours: rmqha/broker, which also runs the 5.x proxy;
    apache: the one built from ROCKETMQ_HOME; rust: the one built from the binary `make peer-broker` made).
    Raises ClusterError naming the fix."""
    unsupported = sorted(choice.kinds - {"ours", "apache", "rust"})
    if unsupported:
        raise ClusterError(f"the docker backend has no image for {', '.join(unsupported)} (asked for {choice.spec()})")
    images = {"ours": BROKER_IMAGE}
    try:
        if "apache" in choice.kinds:
            apache.check_distribution(choice)
            images["apache"] = apache_image.find_image(client, choice.home)
        if "rust" in choice.kinds:
            rust.check_available(choice)
            images["rust"] = rust_image.find_image(client, str(rust.find_binary()))
    except LookupError as e:
        raise ClusterError(str(e)) from None
    return images


def _preflight(
    cluster: str, topology: Topology, plan: PortPlan, choice: BrokerChoice
) -> tuple[Path, list[str], str, int, dict[str, str]]:
    """Refuse to start what cannot start: (compose file, compose command, project, Toxiproxy API port,
    the image of each implementation)."""
    cfile = compose_file(topology.name)
    if not cfile.is_file():
        raise ClusterError(f"no compose file for topology {topology.name}: {cfile} does not exist")
    compose = compose_command()
    client = docker_client()
    check_images(client, [BROKER_IMAGE, TOXIPROXY_IMAGE])
    images = implementation_images(client, choice)
    project = project_name(cluster)
    running = _project_containers(client, project)
    if running:
        raise ClusterError(
            f"cluster {cluster!r} is already running (compose project {project}: "
            f"{', '.join(sorted(c.name for c in running))}): `python -m rmqha.cluster down --name "
            f"{cluster}` first, or start another with --name NAME --base-port N"
        )
    check_ports(cluster, topology, plan)
    api_port = toxiproxy_api_port(plan)
    if _port_busy(api_port):
        raise ClusterError(
            f"cannot start cluster {cluster!r}: the Toxiproxy API port {api_port} is in use; pick another --base-port"
        )
    return cfile, compose, project, api_port, images


def _container_overrides(topology: Topology, plan: PortPlan, host: str) -> dict[str, dict[str, str]]:
    """Each node's per-deployment keys, addressed for containers (the HA links are set later)."""
    base = node_overrides(topology, plan, host=host, store_dir_of=lambda n: CONTAINER_STORE)
    overrides: dict[str, dict[str, str]] = {}
    for n in topology.nodes:
        o = dict(base[n.name])
        o["namesrvAddr"] = f"namesrv:{NAMESRV_CONTAINER_PORT}"
        o["brokerIP2"] = n.name
        o["metricsBindAddress"] = "0.0.0.0"  # inside its container; compose publishes it on the host only
        o["mappedFileSizeCommitLog"] = DEFAULT_COMMITLOG_FILE
        o.pop("haMasterAddress", None)
        overrides[n.name] = o
    return overrides


def _prepare_run_dir(run_dir: Path, topology: Topology, old, options: UpOptions, creds) -> list[str]:
    """The run folder and each node's store folder (emptied with --fresh); returns the nodes whose store
    was kept."""
    rf.prepare(run_dir, [n.name for n in topology.nodes], topology.name, old, options.fresh)
    (run_dir / "namesrv").mkdir(exist_ok=True)
    (run_dir / "toxiproxy").mkdir(exist_ok=True)
    kept = []
    for n in topology.nodes:
        sd = rf.store_dir(run_dir, n.name)
        if sd.exists() and any(sd.iterdir()):
            if options.fresh:
                shutil.rmtree(sd)
            else:
                kept.append(n.name)
        sd.mkdir(parents=True, exist_ok=True)
        if creds:
            acl.write_file(sd, creds)
        old_log = rf.broker_log(run_dir, n.name)
        if old_log.exists():
            old_log.unlink()  # the log of an earlier run: saved again at `down`
    return kept


def _compose_env(
    cluster: str, run_dir: Path, plan: PortPlan, host: str, api_port: int, choice: BrokerChoice, images: dict
) -> dict[str, str]:
    """The compose variables every service reads (each node's own are added by _node_records)."""
    if choice.namesrv == "apache":
        namesrv_command = apache_image.namesrv_command(apache.java_opt_ext(apache_image.CONTAINER_JAVA_MAJOR))
    else:
        namesrv_command = OURS_NAMESRV_COMMAND
    return {
        "RMQHA_NAMESRV_IMAGE": images[choice.namesrv],
        "RMQHA_NAMESRV_COMMAND": namesrv_command,
        "RMQHA_CLUSTER": cluster,
        "RMQHA_RUN_DIR": str(run_dir.resolve()),
        "RMQHA_HOST": host,
        "RMQHA_UID": str(os.getuid()),
        "RMQHA_GID": str(os.getgid()),
        "RMQHA_BROKER_IMAGE": BROKER_IMAGE,
        "RMQHA_TOXIPROXY_IMAGE": TOXIPROXY_IMAGE,
        "RMQHA_NAMESRV_PORT": str(plan.namesrv_port),
        "RMQHA_TOXIPROXY_PORT": str(api_port),
        "RMQHA_PROXY_PORT": str(plan.proxy_port),
    }


def _container_acl_link(run_dir: Path, node: str, acl_file: str | None) -> str | None:
    """What an Apache node's rocketmq-home/conf/plain_acl.yml links to for the ACL file its container sees
    at acl_file: under the store, relative through the node's folder (whose mount holds store/ too), so
    the link resolves in the container and on this machine alike; elsewhere, the container's path."""
    if not acl_file:
        return None
    if not acl_file.startswith(CONTAINER_STORE.rstrip("/") + "/"):
        return acl_file
    on_host = rf.store_dir(run_dir, node) / acl_file[len(CONTAINER_STORE.rstrip("/")) + 1 :]
    return apache.local_acl_link(rf.node_dir(run_dir, node) / apache_image.NODE_HOME / "conf", str(on_host))


def _broker_service(
    run_dir: Path, n, c, host: str, kind: str, overrides: dict, images: dict, home: str | None = None
) -> tuple[dict, dict]:
    """(compose variables, state keys) of one broker's container: ours runs the repository's conf file with
    the deployment keys as --set; Apache's 4.9 runs them written into the node's folder, in a home of its
    own there (apache.node_home, made from the distribution at `home` the image was built from);
    rocketmq-rust's runs them written there as its broker.toml."""
    v = env_var(n.name)
    if kind == "rust":
        path = rust.write_run_properties(run_dir, n.name, n.conf_file, overrides)
        command = rust_image.broker_command(overrides["namesrvAddr"])
        observed, keys = c.listenPort, {"properties": str(path), "adminAddr": f"{host}:{c.metrics_port}"}
    elif kind == "apache":
        path = apache.write_run_properties(run_dir, n.name, n.conf_file, overrides)
        link = _container_acl_link(run_dir, n.name, apache.acl_file_of(overrides))
        apache.node_home(rf.node_dir(run_dir, n.name), home, link)
        command = apache_image.broker_command(apache.java_opt_ext(apache_image.CONTAINER_JAVA_MAJOR))
        observed, keys = c.listenPort, {"properties": str(path), "adminAddr": f"{host}:{c.metrics_port}"}
    else:
        command = f"{OURS_BROKER_COMMAND} {shlex.join(set_args(overrides))}"
        observed, keys = c.metrics_port, {}
    env = {f"{v}_IMAGE": images[kind], f"{v}_COMMAND": command, f"{v}_OBSERVED": str(observed)}
    return env, keys


def _node_records(
    run_dir: Path,
    topology: Topology,
    host: str,
    configs: dict,
    overrides: dict[str, dict[str, str]],
    proxies: list[dict],
    env: dict[str, str],
    backend: str,
    choice: BrokerChoice,
    images: dict[str, str],
    project: str,
) -> list[dict]:
    """Each node's record in the state (its node.json written too), and its compose variables in `env`."""
    nodes = []
    for n in topology.nodes:
        c = configs[n.name]
        v = env_var(n.name)
        env[f"{v}_PORT"] = str(c.listenPort)
        env[f"{v}_VIP_PORT"] = str(c.fast_listen_port)
        env[f"{v}_METRICS"] = str(c.metrics_port)
        kind = choice.of(n.name)
        service_env, keys = _broker_service(run_dir, n, c, host, kind, overrides[n.name], images, choice.home)
        env.update(service_env)
        nodes.append(
            {
                **node_record(run_dir, topology, n, c, host, backend, kind, overrides[n.name]),
                **keys,
                "composeProject": project,
                "service": n.name,
                "store": str(rf.store_dir(run_dir, n.name)),
                "containerStore": CONTAINER_STORE,
                "haMasterAddress": c.haMasterAddress,
                "proxies": [p["name"] for p in proxies if p["node"] == n.name],
            }
        )
    return nodes


class DockerBackend(Backend):
    name = "docker"

    # -- lifecycle --------------------------------------------------------------------------------
    @classmethod
    def start(
        cls, cluster: str, run_dir: Path, topology: Topology, plan: PortPlan, options: UpOptions
    ) -> "DockerBackend":
        choice = options.broker or BrokerChoice()
        cfile, compose, project, api_port, images = _preflight(cluster, topology, plan, choice)
        old = rf.read_state(run_dir)
        host = options.host
        overrides = _container_overrides(topology, plan, host)
        extra, per_node = options.extra or {}, dict(options.extra_per_node or {})
        creds = acl.new_credentials() if options.acl else None
        if creds:
            for n in topology.nodes:
                per_node[n.name] = {**acl.broker_sets(CONTAINER_STORE, creds), **per_node.get(n.name, {})}
        proxies, configs = proxies_and_configs(run_dir, topology, plan, host, overrides, extra, per_node)
        proxies.append(proxy5_link(plan, host))
        kept = _prepare_run_dir(run_dir, topology, old, options, creds)
        env = _compose_env(cluster, run_dir, plan, host, api_port, choice, images)
        nodes = _node_records(
            run_dir, topology, host, configs, overrides, proxies, env, cls.name, choice, images, project
        )
        state = {
            "broker": choice.spec(),
            "rocketmqHome": choice.home,
            **state_head(cluster, run_dir, topology, plan, options, cls.name, kept),
            "ports": [list(p) for p in plan.all_ports(topology)] + [["toxiproxy", "API port", api_port]],
            "namesrv": {
                "addr": f"namesrv:{NAMESRV_CONTAINER_PORT}",
                "endpoint": f"{host}:{plan.namesrv_port}",
                "service": "namesrv",
                "log": str(rf.namesrv_log(run_dir)),
            },
            "toxiproxy": {"api": f"http://{host}:{api_port}", "service": "toxiproxy"},
            "proxy": {"endpoint": f"{host}:{plan.proxy_port}", "service": "proxy"},
            "proxies": proxies,
            "compose": {
                "project": project,
                "file": str(cfile),
                "command": compose,
                "envFile": str(run_dir / "compose.env"),
            },
            "env": env,
            "nodes": nodes,
        }
        if creds:
            state["acl"] = creds
        return cls._write_and_up(cluster, run_dir, state)

    @classmethod
    def _write_and_up(cls, cluster: str, run_dir: Path, state: dict) -> "DockerBackend":
        """Write the proxy list, compose.env and the state, then `compose up`; stopped again if that fails."""
        rf.write_json_atomic(run_dir / "toxiproxy.json", toxiproxy_proxies(state))
        _write_env_file(run_dir / "compose.env", state["env"])
        rf.write_state(run_dir, state)
        rf.set_current(cluster)
        backend = cls(cluster, run_dir, state)
        try:
            backend.compose("up", "-d", "--no-build", "--remove-orphans", capture=True, timeout=180)
        except BaseException:
            backend.stop(keep_data=True, timeout=5)
            raise
        return backend

    def stop(self, keep_data: bool = False, timeout: float = 10.0) -> list[str]:
        notes: list[str] = []
        try:
            self.save_logs()
        except ClusterError as e:
            notes.append(f"logs not saved: {e}")
        try:
            self.compose(
                "down", "--volumes", "--remove-orphans", "-t", str(int(timeout)), capture=True, timeout=timeout * 3 + 60
            )
        except ClusterError as e:
            notes.append(str(e))
        return notes + self._release_stores(keep_data)

    # -- compose ----------------------------------------------------------------------------------
    @property
    def project(self) -> str:
        return self.state["compose"]["project"]

    def compose(self, *args: str, capture: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
        c = self.state["compose"]
        cmd = [*c["command"], "-p", c["project"], "-f", c["file"], *args]
        env = {**os.environ, **self.state.get("env", {})}
        try:
            proc = subprocess.run(
                cmd, env=env, cwd=Path(c["file"]).parent, timeout=timeout, text=True, capture_output=capture
            )
        except subprocess.TimeoutExpired:
            raise ClusterError(f"`{shlex.join(cmd)}` did not finish in {timeout:.0f}s") from None
        if proc.returncode != 0:
            detail = (proc.stderr or "").strip().splitlines()[-15:] if capture else []
            raise ClusterError(
                f"`{shlex.join(cmd)}` failed (exit {proc.returncode})"
                + (":\n    " + "\n    ".join(detail) if detail else "")
            )
        return proc

    # -- containers -------------------------------------------------------------------------------
    _client = None

    @property
    def client(self):
        if DockerBackend._client is None:
            DockerBackend._client = docker_client()
        return DockerBackend._client

    def container(self, node: str):
        """The container of a node ("namesrv", "toxiproxy" or a broker), or None when there is none."""
        self._check_node(node)
        found = _project_containers(self.client, self.project, service=node)
        return found[0] if found else None

    def container_name(self, node: str) -> str:
        c = self.container(node)
        return c.name if c else f"{self.project}_{node}_1"

    def _check_node(self, node: str) -> None:
        if node not in ("namesrv", "toxiproxy", "proxy") and node not in self.node_names():
            raise ClusterError(
                f"cluster {self.cluster!r} has no node {node!r}; nodes: "
                + ", ".join(["namesrv", "toxiproxy", "proxy"] + self.node_names())
            )

    def process_state(self, node: str) -> ProcessState:
        try:
            c = self.container(node)
        except ClusterError as e:
            if "has no node" in str(e):
                raise
            return ProcessState(False, "unknown")
        if c is None:
            return ProcessState(False, "stopped" if self.state.get("stoppedAt") else "no container")
        status = c.attrs.get("State", {})
        if status.get("Running") and not status.get("Paused"):
            return ProcessState(True, "running")
        if status.get("Paused"):
            return ProcessState(True, "paused")
        if status.get("Status") == "created":
            return ProcessState(False, "unknown")  # compose is still starting it
        return ProcessState(False, f"exited with code {status.get('ExitCode')}")

    # -- node operations (rmqha/cluster/handle.py calls these) ----------------------------------------------
    def _live_container(self, node: str):
        c = self.container(node)
        if c is None:
            raise ClusterError(f"cluster {self.cluster!r}: {node} has no container (is the cluster up?)")
        return c

    def _wait_status(self, node: str, wanted: tuple[str, ...], timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            c = self._live_container(node)
            if c.status in wanted:
                return c.status
            if time.monotonic() > deadline:
                raise ClusterError(f"{self.project}/{node} is {c.status}, not {'/'.join(wanted)}, after {timeout:.0f}s")
            time.sleep(0.05)

    def container_status(self, node: str) -> str:
        """created, running, paused, restarting, exited, dead."""
        return self._live_container(node).status

    def start_node(self, node: str) -> None:
        if self.container_status(node) == "paused":
            self._live_container(node).unpause()
        if self.container_status(node) != "running":
            self._live_container(node).start()
        self._wait_status(node, ("running",))

    def stop_node(self, node: str, timeout: float = 10.0) -> str | None:
        """SIGTERM (the broker shuts down cleanly), SIGKILL after timeout (docker stop)."""
        c = self._live_container(node)
        if c.status == "paused":
            c.unpause()
        c.stop(timeout=int(timeout))
        self._wait_status(node, ("exited", "dead"))
        return None

    def kill_node(self, node: str) -> None:
        c = self._live_container(node)
        if c.status in ("running", "paused"):
            c.kill(signal="SIGKILL")
        self._wait_status(node, ("exited", "dead"))

    def pause_node(self, node: str) -> None:
        import docker

        # runc gives up freezing a busy cgroup after a short while ("unable to freeze"), seen on a loaded
        # 2-core machine: the container is left running, so trying again is safe
        for attempt in range(3):
            try:
                self._live_container(node).pause()
                return
            except docker.errors.APIError as e:
                if "unable to freeze" not in str(e) or attempt == 2:
                    raise
                time.sleep(0.5)

    def resume_node(self, node: str) -> None:
        if self.container_status(node) == "paused":
            self._live_container(node).unpause()

    def is_paused(self, node: str) -> bool:
        return self.container_status(node) == "paused"

    def store_path(self, node: str) -> Path:
        """The node's store on this machine (bind-mounted into its container)."""
        for n in self.state.get("nodes", []):
            if n["name"] == node:
                return Path(n.get("store") or rf.store_dir(self.run_dir, node))
        raise ClusterError(f"cluster {self.cluster!r} has no broker {node!r}")

    @property
    def network_name(self) -> str:
        return f"{self.project}_default"

    def isolate_node(self, node: str) -> None:
        """Cut the node's container from the compose network: no name server, no peers, no proxy (so no
        client either), no published ports."""
        self.client.networks.get(self.network_name).disconnect(self._live_container(node), force=True)

    def rejoin_node(self, node: str) -> None:
        c = self._live_container(node)
        c.reload()
        if self.network_name in (c.attrs.get("NetworkSettings", {}).get("Networks") or {}):
            return
        self.client.networks.get(self.network_name).connect(c, aliases=[node])

    def node_log(self, node: str, since: float | None = None) -> str:
        kw = {"since": float(since)} if since is not None else {}
        return self._live_container(node).logs(**kw).decode("utf-8", "replace")

    # -- logs -------------------------------------------------------------------------------------
    def _saved_log(self, node: str) -> Path:
        """Where save_logs writes the node's container log in the run folder."""
        if node == "namesrv":
            return rf.namesrv_log(self.run_dir)
        if node == "toxiproxy":
            return self.run_dir / "toxiproxy" / "toxiproxy.log"
        return rf.broker_log(self.run_dir, node)

    def log_path(self, node: str) -> Path | None:
        self._check_node(node)
        p = self._saved_log(node)
        return p if p.exists() and self.state.get("stoppedAt") else None

    def log_location(self, node: str) -> str:
        p = self.log_path(node)
        return str(p) if p else f"docker logs {self.container_name(node)}"

    def log_tail(self, node: str, n: int = 20) -> list[str]:
        p = self.log_path(node)
        if p:
            return rf.tail(p, n)
        c = self.container(node)
        if c is None:
            return []
        return c.logs(tail=n).decode("utf-8", "replace").splitlines()

    def follow_logs(self, nodes: list[str], lines: int = 10, out=None, poll: float = 0.3) -> None:
        out = out or sys.stdout
        out.flush()
        self.compose("logs", "-f", "--tail", str(lines), *nodes, timeout=10**9)

    def save_logs(self) -> None:
        """Write every container's log into the run folder (called by stop, before the containers go)."""
        for node in ["namesrv", "toxiproxy"] + self.node_names():
            c = self.container(node)
            if c is None:
                continue
            p = self._saved_log(node)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(c.logs())

    def node_names(self) -> list[str]:
        return [n["name"] for n in self.state.get("nodes", [])]

    # -- proxies ----------------------------------------------------------------------------------
    @property
    def toxiproxy_api(self) -> str:
        return self.state["toxiproxy"]["api"]

    def proxies(self) -> list[dict] | None:
        """Each proxy of the cluster with its live state (enabled, toxics) from Toxiproxy's API."""
        live, error = {}, None
        try:
            with urllib.request.urlopen(f"{self.toxiproxy_api}/proxies", timeout=1.0) as r:
                live = json.loads(r.read().decode())
        except (urllib.error.URLError, OSError, ValueError) as e:
            error = str(getattr(e, "reason", e))
        out = []
        for p in self.state.get("proxies", []):
            lp = live.get(p["name"])
            out.append(
                {
                    "name": p["name"],
                    "kind": p["kind"],
                    "node": p["node"],
                    "listen": p["listen"],
                    "upstream": p["upstream"],
                    "hostEndpoint": p.get("hostEndpoint"),
                    "enabled": lp.get("enabled") if lp else None,
                    "toxics": [
                        {
                            "name": t.get("name"),
                            "type": t.get("type"),
                            "stream": t.get("stream"),
                            "attributes": t.get("attributes"),
                        }
                        for t in (lp or {}).get("toxics") or []
                    ],
                    "error": None if lp else (error or "not on the Toxiproxy server"),
                }
            )
        return out


# ---- helpers -----------------------------------------------------------------------------------


def _project_containers(client, project: str, service: str | None = None) -> list:
    labels = [f"com.docker.compose.project={project}"]
    if service:
        labels.append(f"com.docker.compose.service={service}")
    return client.containers.list(all=True, filters={"label": labels})


_brokers: dict[tuple[str, str], int] = {}


def container_broker_pid(project: str, service: str, kind: str = "apache") -> int | None:
    """This machine's pid of the broker process in a service's container (Apache's: the RocketMQ JVM;
    rust's: rocketmq-broker-rust), or None (not running, or the engine's processes are not in this
    machine's /proc): where runtime_status reads such a broker's HA connections. The pid is kept while
    it still is such a process, so a status read rarely asks the engine."""
    from .implementations.apache import find_under, is_server_jvm

    is_broker = rust.is_broker_process if kind == "rust" else is_server_jvm
    key = (project, service)
    if key in _brokers and is_broker(_brokers[key]):
        return _brokers[key]
    if DockerBackend._client is None:
        DockerBackend._client = docker_client()
    found = _project_containers(DockerBackend._client, project, service=service)
    init = (found[0].attrs.get("State") or {}).get("Pid") if found else None
    pid = find_under(init, is_broker) if init else None
    if pid:
        _brokers[key] = pid
    return pid


def _port_busy(port: int) -> bool:
    from .local_backend import port_in_use

    return port_in_use(port)


def _write_env_file(path: Path, env: dict[str, str]) -> None:
    lines = [
        "# compose variables of this cluster, written by `python -m rmqha.cluster up` (rmqha/cluster/docker_backend.py).",
        "# docker-compose -p <project> -f compose/docker-compose.<topology>.yml --env-file THIS-FILE ...",
    ]
    for k, v in env.items():
        lines.append(f"{k}={v}")
    path.write_text("\n".join(lines) + "\n")


def sweep_dead_projects(client, project_re) -> list[str]:
    """Remove the containers and networks of compose projects named by `project_re` (group 1: the pid of
    the process that started them) whose process is gone: clusters a killed test or kit run left."""
    removed = set()
    for c in client.containers.list(all=True, filters={"label": "com.docker.compose.project"}):
        project = c.labels.get("com.docker.compose.project", "")
        m = project_re.match(project)
        if not m or pid_alive(int(m.group(1))):
            continue
        c.remove(force=True, v=True)
        removed.add(project)
    for project in removed:
        for net in client.networks.list(names=[f"{project}_default"]):
            try:
                net.remove()
            except Exception:
                pass
    return sorted(removed)
