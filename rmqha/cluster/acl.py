"""`up --acl` (`make cluster-up ACL=1`, the pytest plugin's acl=True): the cluster's brokers run with
aclEnable and a plain_acl.yml the kit writes, and the kit signs its own requests.

The file (in each broker's store, config/plain_acl.yml, so a container sees it where the broker keeps
its other config) has one admin account for the kit and the workloads, its secret drawn per cluster and
kept in state.json ("acl"). Clients started by the kit get the credentials in the environment
(RMQHA_ACCESS_KEY, RMQHA_SECRET_KEY), never in their argv.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from rmqha.runs.recorder import ENV_AK, ENV_SK, credentials_from_env  # noqa: F401 (the recorder signs with them)

ACCESS_KEY = "rmqha-admin"
FILE_IN_STORE = "config/plain_acl.yml"


def new_credentials() -> dict:
    return {"accessKey": ACCESS_KEY, "secretKey": secrets.token_hex(16)}


def acl_yaml(creds: dict) -> str:
    return (
        "# written by the kit (rmqha/cluster/acl.py): one admin account, for the kit's own requests and its workloads\n"
        "globalWhiteRemoteAddresses: []\n"
        "accounts:\n"
        f"  - accessKey: {creds['accessKey']}\n"
        f'    secretKey: "{creds["secretKey"]}"\n'
        "    admin: true\n"
        "    defaultTopicPerm: PUB|SUB\n"
        "    defaultGroupPerm: PUB|SUB\n"
    )


def write_file(store_dir: Path, creds: dict) -> Path:
    path = Path(store_dir) / FILE_IN_STORE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(acl_yaml(creds))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


def broker_sets(store_in_broker: str, creds: dict) -> dict[str, str]:
    """The --set keys of one broker whose store is at store_in_broker (as the broker sees it); a slave
    signs its sync requests to its master with the same account."""
    return {
        "aclEnable": "true",
        "aclConfigFile": f"{store_in_broker.rstrip('/')}/{FILE_IN_STORE}",
        "aclClientAccessKey": creds["accessKey"],
        "aclClientSecretKey": creds["secretKey"],
    }


def env_of(state: dict) -> dict[str, str]:
    """The environment a client of this cluster needs (empty without ACL)."""
    creds = (state or {}).get("acl")
    return {ENV_AK: creds["accessKey"], ENV_SK: creds["secretKey"]} if creds else {}
