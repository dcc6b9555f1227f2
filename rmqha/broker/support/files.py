"""Config files a broker persists (topics.json, consumerOffset.json, subscriptionGroup.json, delayOffset.json,
plain_acl.yml, the properties file): written whole with one atomic rename, read strictly."""

from __future__ import annotations

import json
import os


def atomic_write(path: str, data: bytes) -> None:
    """Replace `path` with `data` so a reader (or a crash) sees the old file or the new one, whole:
    write a sibling temp file, fsync it, rename it over the target, fsync the directory."""
    from rmqha.broker.store.mapped_file import fsync_directory, make_dirs

    directory = os.path.dirname(path) or "."
    created_in = make_dirs(directory)  # config/ made by this write: its entry in the store root too
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    for d in [directory, *created_in]:
        fsync_directory(d)


def read_json_file(path: str):
    """The parsed JSON in `path` (fastjson's unquoted integer keys tolerated), or None if absent.

    A file that exists but does not parse raises ValueError naming the file: a broker must not
    silently start with empty offsets or topics because its config file is damaged.
    """
    from rmqha.broker.remoting import json_body

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None
    if not data.strip():
        return None
    try:
        return json_body.loads(data)
    except (ValueError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e}); fix or remove it") from None
