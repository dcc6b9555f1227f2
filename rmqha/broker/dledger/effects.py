"""What the IO-free core asks its driver to do. Every input method returns a list of these."""

from __future__ import annotations

from dataclasses import dataclass

from .protocol import RequestOrResponse


@dataclass
class Send:
    """Send `request` to peer `peer`; hand its response (or a NETWORK_ERROR one) to `on_response`."""

    peer: str
    request: RequestOrResponse


@dataclass
class Reply:
    """Answer the incoming request `to` (the object `handle_request` was given) with `response`."""

    to: RequestOrResponse
    response: RequestOrResponse


@dataclass
class PersistTerm:
    """Write the `currterm` file (currTerm, voteLeader) before any message sent after this effect."""

    term: int
    vote_for: str | None


@dataclass
class RoleChanged:
    """The role in `term` (RoleChangeHandler.handle): the broker's master/slave switch hangs on this."""

    term: int
    role: str  # "LEADER", "FOLLOWER" or "CANDIDATE"


@dataclass
class Committed:
    """The committed index moved from `old` to `new`; entries old+1..new may be applied."""

    old: int
    new: int


@dataclass
class AppendDone:
    """A client append (by `token`) finished: response.code SUCCESS once a quorum has it."""

    token: object
    response: RequestOrResponse
