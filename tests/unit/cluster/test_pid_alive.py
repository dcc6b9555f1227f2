"""rmqha/cluster/process.py pid_alive, which the docker backend's sweep and crashfs's unmount ask: a zombie
is gone (crashfs waits for its own FUSE process, which it has not reaped), a reaped pid is gone."""

import os
import subprocess
import sys
import time

from rmqha.cluster.process import pid_alive, proc_stat


def test_a_running_process_is_alive_a_zombie_and_a_reaped_one_are_not():
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while (st := proc_stat(child.pid)) is not None and st[0] != "Z":  # exited, not yet reaped
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid)
