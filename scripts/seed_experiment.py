"""The seed document's experiment (bigywater.tech, "Kafka internals 37: Read Committed and Read
Uncommitted"), rewritten from its description and code fragments, against one broker.

A transactional producer writes three records to `tx-demo` and flushes without committing; a
read_uncommitted and a read_committed consumer read what they can; the producer commits and the
read_committed consumer catches up; a second transaction of three records is read by the
read_uncommitted consumer before it is aborted; then fresh consumers of both levels read from offset 0.
It prints exactly the lines the article shows.

Each consumer subscribes in a fresh group, so it starts at offset 0 (`auto.offset.reset=earliest`).

usage: python3 seed_experiment.py HOST:PORT
"""

import sys
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "tx-demo"
# Bounds: every client call and every read ends within these, so a broken broker fails, never hangs.
CALL_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 10.0
# After the expected records arrived, keep polling this long so that extra records would show too.
SETTLE_S = 1.0


def consumer(bootstrap, group, isolation):
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
    })
    c.subscribe([TOPIC])
    return c


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
        if msg is None:
            continue
        if msg.error():
            raise SystemExit(f"consumer error: {msg.error()}")
        seen.append(msg.value().decode())
    return seen


def main():
    bootstrap = sys.argv[1]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(CALL_TIMEOUT_S)

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-demo-producer"})
    p.init_transactions(CALL_TIMEOUT_S)
    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, key=b"k", value=f"inflight-{i}".encode())
    p.flush(CALL_TIMEOUT_S)
    # commit_transaction() has not been called yet.
    c_ru = consumer(bootstrap, "seed-ru", "read_uncommitted")
    c_rc = consumer(bootstrap, "seed-rc", "read_committed")
    print(f"read_uncommitted sees (before commit): {poll(c_ru, 3)}")
    print(f"read_committed sees (before commit): {poll(c_rc, 0)}")

    p.commit_transaction(CALL_TIMEOUT_S)
    time.sleep(1.0)
    print(f"read_committed sees (after commit): {poll(c_rc, 3)}")

    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, key=b"k", value=f"aborted-{i}".encode())
    p.flush(CALL_TIMEOUT_S)
    seen = poll(c_ru, 3)  # not aborted yet
    p.abort_transaction(CALL_TIMEOUT_S)
    print(f"read_uncommitted sees (before abort, transiently): {seen}")
    print(f"read_committed sees (after abort): {poll(c_rc, 0)}  (should be empty)")
    c_ru.close()
    c_rc.close()

    print()
    fresh_ru = consumer(bootstrap, "seed-fresh-ru", "read_uncommitted")
    print("fresh read_uncommitted consumer reading from offset 0 sees ALL raw records:")
    print(f"  {poll(fresh_ru, 6)}")
    fresh_rc = consumer(bootstrap, "seed-fresh-rc", "read_committed")
    print("fresh read_committed consumer reading from offset 0 sees only:")
    print(f"  {poll(fresh_rc, 3)}")
    fresh_ru.close()
    fresh_rc.close()


if __name__ == "__main__":
    main()
