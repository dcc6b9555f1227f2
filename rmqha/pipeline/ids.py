"""Every verdict id the audit gives, in one place, and the verdict names they replace as keys.

A verdict's id is stable ("delivery.lost"); its name is a sentence for people and may change. Tests, the
guarantee matrix and any tool key on (id, subject), never on the name. The subject says what a verdict is
about: a consumer group, a node, a broker group, or "" for the whole run.

NAMES maps the old verdict names (what tools matched before ids existed) to ids; NAME_PATTERNS does the
same for names that carry their subject ("log integrity broker-a"). id_of_name() is the one lookup, so a
tool that keyed on names switches mechanically (tests/unit/pipeline/test_checkers.py checks the table
against the verdicts the checkers give).
"""

from __future__ import annotations

import re

# -- the replica audit (audit.py) -------------------------------------------------------------------
LOG_INTEGRITY = "log.integrity"  # subject: node
REPLICA = "replica.consistent"  # subject: the slave
REPLICA_NO_MASTER = "replica.no-master"  # subject: broker group

# -- DLedger logs (dledger_log.py) ---------------------------------------------------------------
DLEDGER_UNCOMMITTED = "dledger.uncommitted"

# -- delivery per consumer group (delivery.py); subject: the group (queues: the node) ---------------
DELIVERY_LOST = "delivery.lost"
DELIVERY_STRANDED = "delivery.stranded"
DELIVERY_LOST_AFTER = "delivery.lost-after-delivery"
DELIVERY_UNEXPECTED = "delivery.unexpected"
DELIVERY_DUPLICATE = "delivery.duplicate"
DELIVERY_REORDERED = "delivery.reordered"
DELIVERY_INDETERMINATE = "delivery.indeterminate"
DELIVERY_DELIVERED = "delivery.delivered"
DELIVERY_NO_GROUP = "delivery.groups"
DELIVERY_AMBIGUOUS = "delivery.ambiguous-group"
QUEUES = "queues.consistent"

# -- histories against the stored copies (history_check.py) ----------------------------------------
HISTORY_EMPTY = "history.empty"
HISTORY_COUNTS = "history.counts"
# Acknowledged sends on no node at all, for any consumer group or none. Whether an acknowledged send was
# lost is delivery.lost's to judge (per group: what a consumer can get); this one is the storage fact
# beside it (REFERS_TO), kept because it also covers topics no group subscribed to, and because the
# fault attribution ("acknowledged losses by fault", summary.json's lostByFault) counts its list.
HISTORY_ACKED_LOST = "history.acked-lost"
HISTORY_PARKED = "history.parked"
HISTORY_SYNC_ON_SLAVE = "history.sync-on-slave"
HISTORY_UNCONFIRMED = "history.unconfirmed-stored"
HISTORY_ON_MASTER = "history.acked-on-master"
HISTORY_UNIQ_ONCE = "history.uniq-once"
HISTORY_SEND_ONCE = "history.send-once"
HISTORY_PHANTOM = "history.phantom"
HISTORY_QUEUE_ORDER = "history.queue-order"
HISTORY_UNPLACED = "history.unplaced"
HISTORY_ACKED_RECEIVED = "history.acked-received"
HISTORY_SEND_LATENCY = "history.send-latency"
HISTORY_E2E_LATENCY = "history.e2e-latency"

# -- committed consumer offsets (offsets.py); subject: the consumer group, "" when none moved ------
OFFSET_REGRESSION = "delivery.offset-regression"

# -- faults (faults.py) ----------------------------------------------------------------------------
FAULTS_INJECTED = "faults.injected"
FAULTS_NOT_EXERCISED = "faults.not-exercised"
FAULTS_SKIPPED = "faults.skipped"
FAULTS_NON_OK = "faults.non-ok"
FAULTS_LOST = "faults.lost"
FAULTS_DIVERGENT = "faults.divergent"

# -- receives by serving node (served.py), message trace (trace.py) -------------------------------
SERVED = "served.by-node"
TRACE = "trace.summary"

# -- the checkers themselves (checker.py) ------------------------------------------------------------
CHECKER_CRASHED = "checker.crashed"  # subject: the checker's name

# A verdict that restates another's judgement from another angle: id -> the id that owns it.
REFERS_TO = {HISTORY_ACKED_LOST: DELIVERY_LOST}

# The old names (fixed ones) -> ids.
NAMES = {
    "DLedger logs read up to the committed index": DLEDGER_UNCOMMITTED,
    "delivery": DELIVERY_NO_GROUP,
    "histories": HISTORY_EMPTY,
    "history": HISTORY_COUNTS,
    "no acknowledged send lost": HISTORY_ACKED_LOST,
    "acknowledged sends delivered to their topic": HISTORY_PARKED,
    "SYNC_MASTER SEND_OK is on the slave": HISTORY_SYNC_ON_SLAVE,
    "unconfirmed sends stored on the master": HISTORY_UNCONFIRMED,
    "acknowledged sends kept by the master": HISTORY_ON_MASTER,
    "no UNIQ_KEY stored twice": HISTORY_UNIQ_ONCE,
    "one stored copy per logical send": HISTORY_SEND_ONCE,
    "nothing received that was never sent": HISTORY_PHANTOM,
    "per-queue receive order": HISTORY_QUEUE_ORDER,
    "broker group of receives": HISTORY_UNPLACED,
    "acknowledged sends received": HISTORY_ACKED_RECEIVED,
    "send latency (ms)": HISTORY_SEND_LATENCY,
    "end-to-end latency send->receive (ms)": HISTORY_E2E_LATENCY,
    "committed offsets never move back": OFFSET_REGRESSION,
    "faults injected": FAULTS_INJECTED,
    "faults not exercised": FAULTS_NOT_EXERCISED,
    "faults skipped": FAULTS_SKIPPED,
    "non-OK sends by fault": FAULTS_NON_OK,
    "acknowledged losses by fault": FAULTS_LOST,
    "divergences by fault": FAULTS_DIVERGENT,
    "receives by serving node": SERVED,
    "message trace": TRACE,
}

# The old names that carry their subject: (pattern, id); the pattern's group "subject" is the subject.
NAME_PATTERNS = [
    (re.compile(r"^log integrity (?P<subject>.+)$"), LOG_INTEGRITY),
    (re.compile(r"^replica [^:]+: \S+ vs (?P<subject>.+)$"), REPLICA),
    (re.compile(r"^replicas (?P<subject>.+)$"), REPLICA_NO_MASTER),
    (re.compile(r"^delivered (?P<subject>.+)$"), DELIVERY_DELIVERED),
    (re.compile(r"^acknowledged sends delivered to (?P<subject>.+)$"), DELIVERY_LOST),
    (re.compile(r"^nothing acknowledged stranded for (?P<subject>.+)$"), DELIVERY_STRANDED),
    (re.compile(r"^nothing lost after delivery to (?P<subject>.+)$"), DELIVERY_LOST_AFTER),
    (re.compile(r"^nothing unexpected received by (?P<subject>.+)$"), DELIVERY_UNEXPECTED),
    (re.compile(r"^duplicates received by (?P<subject>.+)$"), DELIVERY_DUPLICATE),
    (re.compile(r"^order per sharding key for (?P<subject>.+)$"), DELIVERY_REORDERED),
    (re.compile(r"^broker group of acknowledged sends to (?P<subject>.+)$"), DELIVERY_AMBIGUOUS),
    (re.compile(r"^indeterminate sends to (?P<subject>.+)$"), DELIVERY_INDETERMINATE),
    (re.compile(r"^consume queues match the log on (?P<subject>.+)$"), QUEUES),
    (re.compile(r"^committed offsets of (?P<subject>.+) never move back$"), OFFSET_REGRESSION),
    (re.compile(r"^checker (?P<subject>.+)$"), CHECKER_CRASHED),
]


def id_of_name(name: str) -> tuple[str, str] | None:
    """(id, subject) of an old verdict name, None for a name no verdict had."""
    if name in NAMES:
        return NAMES[name], ""
    for pattern, vid in NAME_PATTERNS:
        m = pattern.match(name)
        if m:
            return vid, m.group("subject")
    return None
