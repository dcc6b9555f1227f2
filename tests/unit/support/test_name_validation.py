"""rmqha/broker/support/validation.py at its exact limits: 127/255-character topics, 120-character groups, the
character set, blank names, and how a bad name is shown in a remark."""

import pytest

from rmqha.broker.support.errors import BadRequest
from rmqha.broker.support.validation import (
    InvalidName,
    check_group,
    check_topic,
    group_problem,
    has_illegal_chars,
    shown,
    signature_matches,
    topic_problem,
)

ALL_ALLOWED = "%|_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def test_every_allowed_character_and_nothing_else():
    assert not has_illegal_chars(ALL_ALLOWED) and not has_illegal_chars("")
    for c in "/.\\ \n\x00$&#*+é\u0130?:;,":
        assert has_illegal_chars("ok" + c), repr(c)
    assert topic_problem(ALL_ALLOWED) is None and group_problem(ALL_ALLOWED[:120]) is None


def test_topic_length_limits_are_exact():
    assert topic_problem("t" * 127) is None
    assert topic_problem("t" * 128) == (
        "The specified topic[" + "t" * 80 + "...(128 chars)] is longer than topic max length 127."
    )
    for prefix in ("%RETRY%", "%DLQ%"):
        assert topic_problem(prefix + "g" * (255 - len(prefix))) is None
        assert "longer than topic max length 255." in topic_problem(prefix + "g" * (256 - len(prefix)))
    assert "max length 127" in topic_problem("x%RETRY%" + "g" * 200)  # the prefix must come first


def test_group_length_limit_is_exact():
    assert group_problem("g" * 120) is None
    assert group_problem("g" * 121) == (
        "The specified group[" + "g" * 80 + "...(121 chars)] is longer than group max length 120."
    )


@pytest.mark.parametrize("name", ["", " ", "   ", "\t"])
def test_blank_names(name):
    assert topic_problem(name) == "The specified topic is blank."
    assert group_problem(name) == "The specified group is blank."


def test_illegal_characters_are_named_in_the_remark():
    assert topic_problem("a/b") == (
        "The specified topic[a/b] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    )
    assert group_problem("g\n1") == (
        "The specified group[g\\n1] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    )


def test_shown_is_bounded_escaped_ascii():
    assert shown("x" * 80) == "x" * 80
    assert shown("x" * 81) == "x" * 80 + "...(81 chars)"
    assert shown("é\n") == "\\xe9\\n"


def test_check_returns_the_name_or_raises_a_bad_request():
    assert check_topic("TopicTest") == "TopicTest" and check_group("G_1") == "G_1"
    with pytest.raises(InvalidName, match="topic is blank") as e:
        check_topic("")
    assert isinstance(e.value, BadRequest)
    with pytest.raises(InvalidName, match="group\\[g g\\] contains illegal"):
        check_group("g g")


def test_signature_matches_only_the_same_text_and_any_given_value_is_safe():
    sig = "bWFzdGVy+/=="
    assert signature_matches(sig, sig) is True
    assert signature_matches(sig, sig[:-1]) is False and signature_matches(sig, sig + "=") is False
    assert signature_matches(sig, "") is False and signature_matches(sig, None) is False
    # a peer's non-ASCII or lone-surrogate text is compared, not raised on (compare_digest refuses such str)
    assert signature_matches("é\ud800", "é\ud800") is True
    assert signature_matches(sig, "é\ud800") is False
    assert signature_matches("5", 5) is True
