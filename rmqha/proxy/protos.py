"""python -m rmqha.proxy.protos: regenerate rmqha/proxy/third_party/rocketmq_apis/v2/*_pb2*.py from the
.proto files beside them with grpcio-tools (make protos). The generated modules are committed, so
installing the project needs no code generator; tests/unit/test_proxy_protos.py fails when they and the
.proto files disagree."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# apache/rocketmq-apis v2.1.2's interface (third_party/rocketmq_apis/README.md)
APIS = "rmqha/proxy/third_party/rocketmq_apis/v2"
PROTOS = (f"{APIS}/definition.proto", f"{APIS}/service.proto")


def generate(out: Path = ROOT) -> None:
    import grpc_tools
    from grpc_tools import protoc

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--pyi_out={out}",
    ]
    if protoc.main(args + [str(ROOT / p) for p in PROTOS]) != 0:
        raise SystemExit("protoc failed")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
