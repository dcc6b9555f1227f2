"""The official client (PyPI rocketmq 0.4.4), recorded: drop-in Producer and PushConsumer classes.

    rec = Recorder(run_dir / "history" / "orders.jsonl", "orders", namesrv)
    p = rec.Producer("OrderPG")           # a rocketmq.client.Producer subclass: same calls
    p.set_namesrv_addr(rec.namesrv); p.start()
    p.send_sync(msg)                      # sent, and one line in the history (rmqha/runs/history.py format)
    c = rec.PushConsumer("OrderCG")       # subscribe(topic, callback): every message recorded first

An application under test takes the class as a parameter (`OrderService(namesrv, producer_cls=...)`),
so its code does not change. send_sync, send_async and send_orderly are recorded (send_oneway and
send_batch pass through unrecorded: the client reports no outcome for them). The history's send_id is
the message's KEYS when the application set them (a logical id: retries of one order share it), else a
fresh id that is put into KEYS, as rmqha/runs/recorder.py's recorder does. To know a message's topic and keys
after it was built, rocketmq.client.Message's constructor and setters are wrapped once to remember
them on the object (nothing else changes).
"""

from __future__ import annotations

import threading
from pathlib import Path

_patched = [False]
_patch_lock = threading.Lock()


def remember_message_fields() -> None:
    """Wrap rocketmq.client.Message so each instance remembers topic, keys, tags and body length."""
    with _patch_lock:
        if _patched[0]:
            return
        from rocketmq.client import Message

        init, set_keys, set_tags, set_body = Message.__init__, Message.set_keys, Message.set_tags, Message.set_body

        def __init__(self, topic):
            init(self, topic)
            self._rmqkit = {"topic": topic.decode() if isinstance(topic, bytes) else topic}

        def remember(fn, key, conv):
            def wrapper(self, value):
                fn(self, value)
                getattr(self, "_rmqkit", {})[key] = conv(value)

            wrapper.__name__ = fn.__name__
            return wrapper

        text = lambda v: v.decode() if isinstance(v, bytes) else str(v)
        Message.__init__ = __init__
        Message.set_keys = remember(set_keys, "keys", text)
        Message.set_tags = remember(set_tags, "tags", text)
        Message.set_body = remember(set_body, "body_len", lambda v: len(v.encode() if isinstance(v, str) else v))
        _patched[0] = True


class Recorder:
    """One history file and the recorded client classes that write it."""

    def __init__(self, path: str | Path, client: str, namesrv: str | None = None, credentials: dict | None = None):
        from rmqha.runs.recorder import HistoryRecorder

        # a cluster started with acl=True: {"accessKey", "secretKey"}; clients that set none of their own
        # sign with these (set_session_credentials) when they start
        self.credentials = credentials
        remember_message_fields()
        self.path = Path(path)
        self.namesrv = namesrv
        self.history = HistoryRecorder(str(self.path), client=client)
        self.client = self.history.client
        self._clients: list = []
        self._lock = threading.Lock()
        self._closed = False
        self.Producer = _producer_class(self)
        self.PushConsumer = _consumer_class(self)

    # -- convenience ------------------------------------------------------------------------------
    def producer(self, group: str, timeout_ms: int | None = None):
        """A started recorded Producer on this cluster's name server."""
        p = self.Producer(group, timeout=timeout_ms)
        p.set_namesrv_addr(self.namesrv)
        p.start()
        return p

    def push_consumer(self, group: str, topic: str, callback=None, ordered: bool = False):
        """A started recorded PushConsumer; callback(msg) runs after the message is
        recorded (raising from it means RECONSUME_LATER, as in rocketmq.client)."""
        c = self.PushConsumer(group, orderly=ordered)
        c.set_namesrv_addr(self.namesrv)
        c.subscribe(topic, callback or (lambda msg: None))
        c.start()
        return c

    def sign(self, client) -> None:
        """The cluster's credentials on a client that set none itself (ACL)."""
        if self.credentials and not getattr(client, "_rmqkit_signed", False):
            client.set_session_credentials(self.credentials["accessKey"], self.credentials["secretKey"], "")

    def records(self) -> list[dict]:
        from rmqha.runs.history import read_history

        return read_history(str(self.path)) if self.path.exists() else []

    # -- recording --------------------------------------------------------------------------------
    def _append(self, rec: dict) -> None:
        with self._lock:
            if not self._closed:
                self.history.writer.append(rec)

    def send_record(self, msg) -> dict:
        """The history fields of a send of msg; sets KEYS to a fresh send_id when the app set none."""
        f = getattr(msg, "_rmqkit", {})
        send_id = f.get("keys")
        if not send_id:
            send_id = self.history.new_send_id()
            msg.set_keys(send_id)
        return {
            "client": self.client,
            "op": "send",
            "topic": f.get("topic"),
            "send_id": send_id,
            "attempt": 1,
            "body_len": f.get("body_len"),
        }

    def sent(self, call, msg):
        """call(msg), recorded by the one recorder (rmqha/runs/recorder.py): a try never answered stays visible."""
        return self.history.record_call(call, msg, self.send_record(msg), self._append)

    def _append_direct(self, write) -> None:
        """write(HistoryRecorder), unless the history is closed."""
        with self._lock:
            if not self._closed:
                write(self.history)

    def received(self, msg, ordered: bool, group: str | None = None) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                self.history.record_receive(msg, ordered, group)
            except Exception:  # never turn a recording problem into a redelivery of the app's message
                pass

    def flush(self) -> None:
        """Lines are written as they happen (line-buffered); kept for symmetry with close()."""

    def close(self) -> None:
        """Shut down the clients this recorder made that are still running, then close the file."""
        for c in list(self._clients):
            try:
                c.shutdown()
            except Exception:
                pass
        with self._lock:
            if not self._closed:
                self._closed = True
                self.history.close()


def _lifecycle(rec: Recorder, base: type) -> type:
    """`base` (a client class) signed with the kit's credentials at start unless the app signed it, and
    known to the recorder while it runs (close() shuts down what is left)."""

    class Recorded(base):  # type: ignore[misc,valid-type]
        def set_session_credentials(self, *a):
            self._rmqkit_signed = True
            return super().set_session_credentials(*a)

        def start(self):
            rec.sign(self)
            super().start()
            rec._clients.append(self)

        def shutdown(self):
            if self in rec._clients:
                rec._clients.remove(self)
            super().shutdown()

    return Recorded


def _producer_class(rec: Recorder):
    from rocketmq.client import Producer

    class RecordedProducer(_lifecycle(rec, Producer)):  # type: ignore[misc]
        __doc__ = f"rocketmq.client.Producer whose sends are recorded in {rec.path}."

        def send_sync(self, msg):
            return rec.sent(super().send_sync, msg)

        def send_orderly(self, msg, arg, *a, **kw):
            return rec.sent(lambda m: super(RecordedProducer, self).send_orderly(m, arg, *a, **kw), msg)

        def send_async(self, msg, success_callback, exception_callback):
            r = rec.send_record(msg)
            h = rec.history

            def ok(res):
                rec._append(h.answered(r, res))
                if success_callback is not None:
                    success_callback(res)

            def err(exc):
                rec._append(h.failed(r, exc))
                if exception_callback is not None:
                    exception_callback(exc)

            h.invoked(r, rec._append)
            try:
                return super().send_async(msg, ok, err)
            except Exception as e:
                rec._append(h.failed(r, e))
                raise

    return RecordedProducer


def _consumer_class(rec: Recorder):
    from rocketmq.client import PushConsumer

    class RecordedPushConsumer(_lifecycle(rec, PushConsumer)):  # type: ignore[misc]
        __doc__ = f"rocketmq.client.PushConsumer whose received messages are recorded in {rec.path}."

        def __init__(self, group_id, *args, **kwargs):
            super().__init__(group_id, *args, **kwargs)
            self._rmqkit_group = group_id.decode() if isinstance(group_id, bytes) else str(group_id)

        def subscribe(self, topic, callback, expression="*"):
            ordered = bool(getattr(self, "_orderly", False))
            group = self._rmqkit_group
            # owed from now on: a test's group is judged on what was sent while it listened
            rec._append_direct(
                lambda h: h.subscribed(
                    group, topic.decode() if isinstance(topic, bytes) else topic, ordered, from_first=False
                )
            )

            def recorded(msg):
                rec.received(msg, ordered, group)
                return callback(msg)

            return super().subscribe(topic, recorded, expression)

        def shutdown(self):
            super().shutdown()
            rec._append_direct(lambda h: h.unsubscribed(self._rmqkit_group))

    return RecordedPushConsumer
