"""The `group` fixture (three DLedger broker stores on one task.Clock, test_dledger_commitlog.py) and `cfs`
(a crashfs mount, tests/unit/crashfs/conftest.py) for every test module here."""

from ..crashfs.conftest import cfs, crashfs_ready  # noqa: F401
from .test_dledger_commitlog import group  # noqa: F401
