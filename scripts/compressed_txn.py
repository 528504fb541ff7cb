"""Compressed transactions through confluent-kafka (librdkafka): for each codec named on the command line,
a transactional producer with that `compression.type` commits two records, aborts two and commits one on
`cz-CODEC` (one partition); then fresh readers of both isolation levels from offset 0 print the (offset,
label) pairs they delivered.

Each value is its label padded with dots, so that every batch shrinks when compressed: a producer may
send a batch uncompressed where its codec would not make it smaller, and the test checks the codec.

usage: python3 compressed_txn.py HOST:PORT CODEC...
"""

import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clients import CALL_TIMEOUT_S, READ_TIMEOUT_S, SETTLE_S

PAD = "." * 200


def transaction(producer, topic, labels, commit):
    producer.begin_transaction()
    for label in labels:
        producer.produce(topic, value=(label + PAD).encode())
    producer.flush(CALL_TIMEOUT_S)
    if commit:
        producer.commit_transaction(CALL_TIMEOUT_S)
    else:
        producer.abort_transaction(CALL_TIMEOUT_S)


def label(msg):
    """The label of a padded value; any other value as it came, so that a wrong byte shows."""
    if msg.error():
        raise SystemExit(f"consumer error: {msg.error()}")
    value = msg.value().decode()
    return value[: -len(PAD)] if value.endswith(PAD) else value


def read(bootstrap, topic, isolation, want):
    """(offset, label) pairs from offset 0 until `want` arrived (then SETTLE_S more) or the timeout."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"{topic}-{isolation}",
        "isolation.level": isolation,
        "enable.auto.commit": False,
    })
    c.assign([TopicPartition(topic, 0, 0)])
    seen = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    settle_until = None
    while time.monotonic() < deadline:
        if len(seen) >= want and settle_until is None:
            settle_until = time.monotonic() + SETTLE_S
        if settle_until is not None and time.monotonic() >= settle_until:
            break
        msg = c.poll(0.1)
        if msg is not None:
            seen.append((msg.offset(), label(msg)))
    c.close()
    return seen


def main():
    bootstrap, codecs = sys.argv[1], sys.argv[2:]
    topics = [f"cz-{codec}" for codec in codecs]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in topics]).values():
        f.result(CALL_TIMEOUT_S)
    for codec, topic in zip(codecs, topics):
        p = Producer({
            "bootstrap.servers": bootstrap,
            "transactional.id": f"{topic}-producer",
            "compression.type": codec,
        })
        p.init_transactions(CALL_TIMEOUT_S)
        transaction(p, topic, ["c-0", "c-1"], commit=True)
        transaction(p, topic, ["a-0", "a-1"], commit=False)
        transaction(p, topic, ["c-2"], commit=True)
        print(f"{codec} read_uncommitted from 0: {read(bootstrap, topic, 'read_uncommitted', 5)}")
        print(f"{codec} read_committed from 0: {read(bootstrap, topic, 'read_committed', 3)}")


if __name__ == "__main__":
    main()
