import pytest

from rmqha.broker.store.message_store import MessageStore
from rmqha.broker.store.record import Message

FILE_SIZE = 4096


def open_store(root, file_size=FILE_SIZE, cq_file_size=20 * 50, **kw):
    store = MessageStore(str(root), commitlog_file_size=file_size, cq_file_size=cq_file_size, **kw)
    store.start()
    return store


def msg(i, topic="T", queue_id=0, size=100, tags=None):
    props = {"UNIQ_KEY": f"K{i:06d}"}
    if tags:
        props["TAGS"] = tags
    return Message(
        topic=topic,
        body=(f"m{i}:".encode() * size)[:size],
        queue_id=queue_id,
        born_timestamp=1000 + i,
        properties=props,
    )


@pytest.fixture
def store_factory(tmp_path):
    opened = []

    def factory(name="s", **kw):
        s = open_store(tmp_path / name, **kw)
        opened.append(s)
        return s

    yield factory
    for s in opened:
        if not s.closed:
            s.shutdown()
