"""rmqha/matrix/sweeps.py: the rmqha.chaos.run command of one sweep."""

import subprocess

from rmqha.matrix import cli, sweeps


def _command(tmp_path, monkeypatch, argv, mode="ours", topology="2m-2s-sync"):
    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(sweeps.subprocess, "run", fake_run)
    monkeypatch.setattr(sweeps, "free_base", lambda *a, **k: 23000)
    args, _configs, _modes = cli.parse_args(argv + ["--out", str(tmp_path)])
    sweeps.sweep(topology, "ASYNC_FLUSH", "local", ["power-loss"], 1, args, tmp_path, 0, mode)
    (cmd,) = seen
    return cmd


def test_every_mode_cuts_power_with_the_fs_semantics_the_matrix_was_given(tmp_path, monkeypatch):
    monkeypatch.delenv("FS_SEMANTICS", raising=False)
    cmd = _command(tmp_path, monkeypatch, [])
    assert cmd[cmd.index("--fs-semantics") + 1] == "posix"  # the default: POSIX's worst case
    for mode in ("ours", "4.9"):
        cmd = _command(tmp_path, monkeypatch, ["--fs-semantics", "ext4"], mode)
        assert cmd[cmd.index("--fs-semantics") + 1] == "ext4", cmd
        assert cmd[cmd.index("--nemesis") + 1] == "power-loss"
    monkeypatch.setenv("FS_SEMANTICS", "ext4")  # as rmqha.chaos.run reads it
    assert "ext4" in _command(tmp_path, monkeypatch, [], topology="dledger")
