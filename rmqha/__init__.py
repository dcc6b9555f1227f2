"""rmqha: a reference cluster for Apache RocketMQ 4.x master/slave HA replication.

Layers, lowest first (the import contract in pyproject.toml enforces them): `broker` (the broker and
name server), `cluster` (run folders, ports, processes, topologies), `chaos` and `pipeline` (fault runs
and the Spark audit, independent of each other), `rmqkit` (the pytest plugin). docs/architecture.md
says where each behaviour lives.
"""
