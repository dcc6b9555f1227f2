"""Cluster tooling: start, watch and stop a RocketMQ HA reference cluster with one command.

    python -m rmqha.cluster up --topology 2m-2s-sync --backend local [--name NAME] [--base-port N]
    python -m rmqha.cluster status [--format table|json]
    python -m rmqha.cluster logs [NODE]
    python -m rmqha.cluster down [--keep-data]

Modules:
    topology       the official conf files in compose/<topology>/, the port plan, per-node overrides
    runfolder      run/<name>/: state.json, nodes/<node>/{node.json,broker.log,store/}, run/current
    backend        what a backend must provide, and how one is chosen (local now, docker later)
    local_backend  brokers and the name server as detached processes on loopback
    status         each node's /status plus the name server's cluster info, as a table or JSON
    wait           block until the cluster is ready, with live progress
    history        the client history format (RUN/history/*.jsonl): fields, writer, reader
    toxics         Toxiproxy control of a docker cluster's links
    standalone     one name server or broker as a local process, for tests and benchmarks that build their own
    requests       client requests (SEND_MESSAGE v1/v2) as the C++ client sends them
"""


class ClusterError(Exception):
    """A failure the user can act on. The message says what went wrong and what to do next."""


class Unsupported(ClusterError):
    """The backend cannot do this operation (the message says why and what can)."""
