"""The ACL admin requests' edits of plain_acl.yml, IO-free: 4.9.8's PlainPermissionManager
(updateAccessConfig, deleteAccessConfig, updateGlobalWhiteAddrsConfig) as functions of the file's
parsed document.

Each edit takes the document as read from disk and returns a new one, or raises AclAdminError with the
remark to answer. The caller then moves the document's dataVersion on (next_version), checks that the
result loads (rmqha/broker/acl/rules.py's AclConfig.from_dict, so nothing is written that the broker would refuse
at its next start) and writes dump()'s text in one atomic rename.

What 4.9.8 does and this follows:
  * an update merges into the account of that accessKey (secretKey and admin always set; a
    whiteRemoteAddress, default perm or perm list only when the request carries it), a new key is
    appended to `accounts`;
  * accessKey and secretKey must be longer than 6 characters (AclConstants.*_KEY_MIN_LENGTH);
  * topicPerms / groupPerms are comma-separated NAME=PERM, PERM exactly one of DENY, PUB, SUB, PUB|SUB,
    SUB|PUB (Permission.checkResourcePerms, with its messages);
  * the file's `dataVersion: [{counter, timestamp}]` gets counter + 1 and the time of the edit.
Stricter than 4.9.8 (it writes these and fails at the next load, or silently reads DENY): a default perm
that is not one of the five, and an address pattern rmqha/broker/acl/rules.py cannot read, are refused here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from rmqha.broker.acl.rules import AclConfigError, AddressMatcher

KEY_MIN_LENGTH = 6  # 4.9.8's ACCESS_KEY_MIN_LENGTH and SECRET_KEY_MIN_LENGTH: a key must be longer
PERMS = ("DENY", "PUB", "SUB", "PUB|SUB", "SUB|PUB")


class AclAdminError(Exception):
    """A request the edit refuses; str() is the remark."""


@dataclass
class AccessUpdate:
    """CreateAccessConfigRequestHeader's fields, None where the request leaves one out."""

    access_key: str | None
    secret_key: str | None
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: list[str] | None = None
    group_perms: list[str] | None = None


def split_list(text: str | None) -> list[str] | None:
    """UtilAll.split(text, ","): None stays None; empty items (as "" from an mqadmin run without -t)
    are dropped rather than refused."""
    if text is None:
        return None
    return [item.strip() for item in text.split(",") if item.strip()]


def check_update(u: AccessUpdate) -> None:
    """4.9.8's checkPlainAccessConfig and checkResourcePerms, then what rmqha/broker/acl/rules.py needs to load it.
    The secret key is never echoed (4.9.8 puts it in the remark)."""
    ak, sk = u.access_key, u.secret_key
    if not ak or not sk or len(ak) <= KEY_MIN_LENGTH or len(sk) <= KEY_MIN_LENGTH:
        shown = "null" if sk is None else f"<{len(sk)} characters>"
        raise AclAdminError(
            f"The accessKey={ak} and secretKey={shown} cannot be null and length should longer than {KEY_MIN_LENGTH}"
        )
    for items in (u.topic_perms, u.group_perms):
        for item in items or ():
            parts = [p for p in item.split("=") if p]  # StringUtils.split: adjacent separators are one
            if len(parts) != 2:
                raise AclAdminError(
                    f"Parse Resource format error for {item}.\n"
                    "The expected resource format is 'Res=Perm'. For example: topicA=SUB"
                )
            if parts[1].strip() not in PERMS:
                raise AclAdminError(
                    f"Parse resource permission error for {item}.\n"
                    "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'."
                )
    for name, perm in (("defaultTopicPerm", u.default_topic_perm), ("defaultGroupPerm", u.default_group_perm)):
        if perm and perm.strip() not in PERMS:
            raise AclAdminError(f"{name}={perm} is not one of {', '.join(PERMS)}")
    if u.white_remote_address:
        check_addresses([u.white_remote_address], "whiteRemoteAddress")


def check_addresses(patterns: list[str], what: str) -> None:
    for p in patterns:
        try:
            AddressMatcher(p)
        except AclConfigError as e:
            raise AclAdminError(f"{what}: {e}") from None


def _accounts(doc: dict) -> list:
    accounts = doc.get("accounts")
    return accounts if isinstance(accounts, list) else []


def upsert_account(doc: dict, u: AccessUpdate) -> dict:
    """4.9.8's updateAccessConfig on one file: the account merged with the request, or appended."""
    check_update(u)
    out = copy.deepcopy(doc)
    accounts = _accounts(out)
    found = next((a for a in accounts if isinstance(a, dict) and str(a.get("accessKey")) == u.access_key), None)
    account = found if found is not None else {}
    account["accessKey"] = u.access_key
    account["secretKey"] = u.secret_key
    if u.white_remote_address is not None:
        account["whiteRemoteAddress"] = u.white_remote_address
    account["admin"] = u.admin
    if u.default_topic_perm:
        account["defaultTopicPerm"] = u.default_topic_perm.strip()
    if u.default_group_perm:
        account["defaultGroupPerm"] = u.default_group_perm.strip()
    if u.topic_perms is not None:
        account["topicPerms"] = list(u.topic_perms)
    if u.group_perms is not None:
        account["groupPerms"] = list(u.group_perms)
    if found is None:
        accounts.append(account)
    out["accounts"] = accounts
    return out


def delete_account(doc: dict, access_key: str) -> dict | None:
    """4.9.8's deleteAccessConfig: the document without that account, or None when there is none."""
    if not access_key:
        return None
    accounts = _accounts(doc)
    kept = [a for a in accounts if not (isinstance(a, dict) and str(a.get("accessKey")) == access_key)]
    if len(kept) == len(accounts):
        return None
    out = copy.deepcopy(doc)
    out["accounts"] = copy.deepcopy(kept)
    return out


def set_global_white(doc: dict, patterns: list[str]) -> dict:
    """4.9.8's updateGlobalWhiteAddrsConfig: the list replaced as given."""
    check_addresses(patterns, "globalWhiteRemoteAddresses")
    out = copy.deepcopy(doc)
    out["globalWhiteRemoteAddresses"] = list(patterns)
    return out


# -- dataVersion -----------------------------------------------------------------------------------


def data_version(doc: dict) -> dict | None:
    """The file's dataVersion (the first element of its list, as 4.9.8 reads it), or None."""
    versions = doc.get("dataVersion") if isinstance(doc, dict) else None
    if not isinstance(versions, list) or not versions or not isinstance(versions[0], dict):
        return None
    first = versions[0]
    try:
        return {"counter": int(first.get("counter", 0)), "timestamp": int(first.get("timestamp", 0))}
    except (TypeError, ValueError):
        return None


def next_version(doc: dict, now_ms: int) -> tuple[dict, dict]:
    """The document with its dataVersion moved on (DataVersion.nextVersion), and that version."""
    old = data_version(doc) or {"counter": 0}
    version = {"counter": old["counter"] + 1, "timestamp": int(now_ms)}
    out = dict(doc)
    out["dataVersion"] = [dict(version)]
    return out, version


def load_doc(text: str, where: str) -> dict:
    """plain_acl.yml's document (an empty file is an empty one), or AclConfigError."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise AclConfigError(f"{where} is not valid YAML: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise AclConfigError(f"{where}: expected a mapping with globalWhiteRemoteAddresses and accounts")
    return doc


def dump(doc: dict) -> bytes:
    """Block-style YAML as 4.9.8's SnakeYAML dumpAsMap writes it (the file's comments are not kept,
    as there)."""
    import yaml

    return yaml.safe_dump(doc, default_flow_style=False, sort_keys=False, allow_unicode=True).encode("utf-8")
