"""Requests sent with the project's own remoting client (rmqha.broker.remoting.protocol.RemotingClient), in a
process of their own (a Twisted reactor cannot be restarted inside pytest).

    python -m tests.integration.remoting_query_worker '<json job>'   -> one JSON line: {"replies": [...]}

job: {"requests": [{"addr": "127.0.0.1:P", "code": 12, "fields": {...}}, ...]}, sent one after another.
Each reply: {"code", "remark", "ext": {...}, "body": hex}, or {"error": "..."}.
"""

import json
import sys

from twisted.internet import defer, task

from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.protocol import RemotingClient


@defer.inlineCallbacks
def main(reactor, job):
    client = RemotingClient(reactor, connect_timeout=5)
    out = []
    for r in job["requests"]:
        try:
            resp = yield client.invoke(r["addr"], RemotingCommand.request(r["code"], r.get("fields")), timeout=10)
            out.append(
                {
                    "code": resp.code,
                    "remark": resp.remark,
                    "ext": dict(resp.ext_fields or {}),
                    "body": bytes(resp.body or b"").hex(),
                }
            )
        except Exception as e:  # a refused connection, a timeout: reported, the rest still sent
            out.append({"error": f"{type(e).__name__}: {e}"})
    client.close()
    print(json.dumps({"replies": out}), flush=True)


if __name__ == "__main__":
    task.react(main, [json.loads(sys.argv[1])])
