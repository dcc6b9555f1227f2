"""rmqha/broker/support/beans.py: fastjson's bean names from attribute names, in the order given."""

from types import SimpleNamespace

import pytest

from rmqha.broker.support.beans import bean_json, camel


def test_camel_case_of_snake_case_names():
    assert camel("last_error") == "lastError"
    assert camel("push2slave_max_offset") == "push2slaveMaxOffset"
    assert camel("syncs") == "syncs"


def test_keys_in_the_order_given_and_renamed_keys_in_place():
    obj = SimpleNamespace(is_batch=True, count=2, last_error=None, read_queue_nums=8)
    view = bean_json(obj, "read_queue_nums batch=is_batch last_error count")
    assert list(view.items()) == [("readQueueNums", 8), ("batch", True), ("lastError", None), ("count", 2)]


def test_a_missing_attribute_is_an_error_not_a_missing_key():
    obj = SimpleNamespace(syncs=1)
    with pytest.raises(AttributeError, match="failures"):
        bean_json(obj, "syncs failures")


def test_forwarded_reads_the_members_value_each_time_and_cannot_be_set():
    from types import SimpleNamespace

    import pytest

    from rmqha.broker.support.beans import forwarded

    class Store:
        max_offset = forwarded("log.end")

        def __init__(self):
            self.log = SimpleNamespace(end=7)

    s = Store()
    assert s.max_offset == 7
    s.log.end = 9
    assert s.max_offset == 9
    with pytest.raises(AttributeError):
        s.max_offset = 1
