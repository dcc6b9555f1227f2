"""rmqha/broker/remoting/handlers.py: @handles marks, Processors.register installs, and no request code is
claimed twice among the broker's processors or the name server's."""

import importlib
import pkgutil

import pytest
from twisted.internet import defer

from rmqha.broker import processors as broker_processors
from rmqha.broker.namesrv.processors import NameServerProcessors
from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.remoting.handlers import Processors, handlers, handles
from rmqha.broker.remoting.protocol import ProcessorRegistry


class Family(Processors):
    def __init__(self, optional=None):
        self.optional = optional

    @handles(RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE)
    def pull(self, req, ctx):
        return "pull"

    @handles(RequestCode.GET_ALL_DELAY_OFFSET, when=lambda self: self.optional is not None)
    def delay_offsets(self, req, ctx):
        return "delay"

    @handles(RequestCode.HEART_BEAT)
    @defer.inlineCallbacks
    def heart_beat(self, req, ctx):
        yield None
        return "beat"

    def helper(self, req, ctx):
        return "not a handler"


def installed(family):
    reg = ProcessorRegistry()
    family.register(reg)
    return {code: reg.get(code) for code in reg._processors}


def test_every_marked_method_is_installed_under_each_of_its_codes():
    family = Family()
    table = installed(family)
    assert set(table) == {RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE, RequestCode.HEART_BEAT}
    assert table[RequestCode.PULL_MESSAGE] == family.pull and table[RequestCode.LITE_PULL_MESSAGE] == family.pull
    assert table[RequestCode.HEART_BEAT](None, None).result == "beat"


def test_a_conditional_code_is_installed_only_when_its_part_is_there():
    assert RequestCode.GET_ALL_DELAY_OFFSET not in installed(Family())
    table = installed(Family(optional=object()))
    assert table[RequestCode.GET_ALL_DELAY_OFFSET](None, None) == "delay"


def test_a_subclass_override_serves_the_code():
    class Other(Family):
        def pull(self, req, ctx):
            return "other pull"

    assert installed(Other())[RequestCode.PULL_MESSAGE](None, None) == "other pull"


def test_handles_needs_a_code():
    with pytest.raises(TypeError, match="at least one request code"):
        handles()


def _broker_families():
    for info in pkgutil.iter_modules(broker_processors.__path__):
        module = importlib.import_module(f"{broker_processors.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Processors) and value.__module__ == module.__name__:
                yield value


def test_no_request_code_is_claimed_twice():
    """One registry holds the broker's families: a code marked twice would be served by whichever
    registered last. The name server's family is a registry of its own."""
    families = list(_broker_families())
    assert len(families) >= 20
    owner = {}
    for family in families:
        for name, codes, _when in handlers(family):
            for code in codes:
                assert code not in owner, f"{code!r}: {owner.get(code)} and {family.__name__}.{name}"
                owner[code] = f"{family.__name__}.{name}"
    namesrv = [code for _name, codes, _when in handlers(NameServerProcessors) for code in codes]
    assert len(namesrv) == len(set(namesrv)) == 20
