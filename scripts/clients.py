"""What the wire scripts share: their bounds, a subscribed consumer, and bounded reads.

Every client call and every read ends within these bounds, so a broken broker fails a script, never
hangs it.
"""

import time

from confluent_kafka import Consumer

CALL_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 10.0
# After the expected records arrived, keep polling this long so that extra records would show too: a
# consumer's fetch (fetch.wait.max.ms 500) returns every record already readable, so one wait suffices.
SETTLE_S = 0.5


def consumer(bootstrap, group, isolation, topic, **config):
    """A consumer of `topic` in `group` at `isolation`, from the earliest offset when the group has none."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
        **config,
    })
    c.subscribe([topic])
    return c


def value(msg):
    if msg.error():
        raise SystemExit(f"consumer error: {msg.error()}")
    return msg.value().decode()


def take(c, n):
    """The next `n` records' values, or fewer if READ_TIMEOUT_S passes first."""
    seen = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    while len(seen) < n and time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is not None:
            seen.append(value(msg))
    return seen


def poll(c, want):
    """Values delivered until `want` arrived (then SETTLE_S more), or READ_TIMEOUT_S passed. Polling
    starts with the group's assignment, so an empty answer means the consumer read and found nothing."""
    seen = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    settle_until = None
    while time.monotonic() < deadline and not c.assignment():
        msg = c.poll(0.1)
        if msg is not None and not msg.error():
            seen.append(msg.value().decode())
    while time.monotonic() < deadline:
        if len(seen) >= want and settle_until is None:
            settle_until = time.monotonic() + SETTLE_S
        if settle_until is not None and time.monotonic() >= settle_until:
            break
        msg = c.poll(0.1)
        if msg is not None:
            seen.append(value(msg))
    return seen
