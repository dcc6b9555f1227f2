"""The `group` fixture (three DLedger broker stores on one task.Clock, test_dledger_commitlog.py) for every
test module here."""

from .test_dledger_commitlog import group  # noqa: F401
