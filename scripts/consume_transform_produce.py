"""Consume-transform-produce with exactly-once offsets (KIP-98, KIP-447), through confluent-kafka.

Four records are written to `ctp-in`. A read_committed consumer in group `ctp-group` (no auto-commit)
reads them two at a time; for each pair a transactional producer writes the upper-cased values to
`ctp-out` and hands the consumer's next offset to the transaction with `send_offsets_to_transaction`
(AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator). The first transaction commits, the
second aborts. Then it prints the group's committed offset (an OffsetFetch with require_stable, as
librdkafka asks for a read_committed consumer), where a new member of the group resumes, and what
fresh consumers of both isolation levels read from `ctp-out`.

usage: python3 consume_transform_produce.py HOST:PORT
"""

import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

IN, OUT, GROUP = "ctp-in", "ctp-out", "ctp-group"
# Bounds: every client call and every read ends within these, so a broken broker fails, never hangs.
CALL_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 10.0
# After the expected records arrived, keep polling this long so that extra records would show too.
SETTLE_S = 1.0


def consumer(bootstrap, group, isolation, topic):
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    c.subscribe([topic])
    return c


def take(c, n):
    """The next `n` records' values, within READ_TIMEOUT_S."""
    seen = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    while len(seen) < n and time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is None:
            continue
        if msg.error():
            raise SystemExit(f"consumer error: {msg.error()}")
        seen.append(msg.value().decode())
    return seen


def read_all(c, want):
    """Values delivered until `want` arrived (then SETTLE_S more), or READ_TIMEOUT_S passed."""
    seen = take(c, want)
    settle_until = time.monotonic() + SETTLE_S
    while time.monotonic() < settle_until:
        msg = c.poll(0.1)
        if msg is not None and not msg.error():
            seen.append(msg.value().decode())
    return seen


def transaction(producer, source, values, next_offset, commit):
    producer.begin_transaction()
    for v in values:
        producer.produce(OUT, value=v.upper().encode())
    # Delivered before the transaction ends, so the aborted pair is in the log too (an abort purges
    # what librdkafka has not sent yet).
    producer.flush(CALL_TIMEOUT_S)
    offsets = [TopicPartition(IN, 0, next_offset)]
    producer.send_offsets_to_transaction(offsets, source.consumer_group_metadata(), CALL_TIMEOUT_S)
    if commit:
        producer.commit_transaction(CALL_TIMEOUT_S)
    else:
        producer.abort_transaction(CALL_TIMEOUT_S)
    ended = "committed" if commit else "aborted"
    print(f"{ended}: produced {[v.upper() for v in values]}, offsets to {next_offset}")


def main():
    bootstrap = sys.argv[1]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in (IN, OUT)]).values():
        f.result(CALL_TIMEOUT_S)

    plain = Producer({"bootstrap.servers": bootstrap})
    for v in ["a", "b", "c", "d"]:
        plain.produce(IN, value=v.encode())
    plain.flush(CALL_TIMEOUT_S)

    source = consumer(bootstrap, GROUP, "read_committed", IN)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp-producer"})
    p.init_transactions(CALL_TIMEOUT_S)

    first = take(source, 2)
    print(f"consumed: {first}")
    transaction(p, source, first, 2, commit=True)
    second = take(source, 2)
    print(f"consumed: {second}")
    transaction(p, source, second, 4, commit=False)

    committed = source.committed([TopicPartition(IN, 0)], CALL_TIMEOUT_S)
    print(f"{GROUP} committed offsets: {[(tp.topic, tp.partition, tp.offset) for tp in committed]}")
    source.close()

    resumed = consumer(bootstrap, GROUP, "read_committed", IN)
    print(f"a new member of {GROUP} resumes with: {read_all(resumed, 2)}")
    resumed.close()
    rc = consumer(bootstrap, "ctp-check-rc", "read_committed", OUT)
    print(f"read_committed on {OUT}: {read_all(rc, 2)}")
    rc.close()
    ru = consumer(bootstrap, "ctp-check-ru", "read_uncommitted", OUT)
    print(f"read_uncommitted on {OUT}: {read_all(ru, 4)}")
    ru.close()


if __name__ == "__main__":
    main()
