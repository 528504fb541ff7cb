"""A second, independent client against `txnsim serve`: kafka-python (pure Python, its own protocol
code, no librdkafka). Three transactions on `kp-demo`: commit two records, abort two, commit one; then
fresh readers of both isolation levels from offset 0 print (offset, value) for what they delivered.

usage: python3 kafka_python_txn.py HOST:PORT
"""

import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

TOPIC = "kp-demo"
READ_TIMEOUT_S = 10.0
SETTLE_S = 0.5


def transaction(producer, values, commit):
    producer.begin_transaction()
    for v in values:
        producer.send(TOPIC, key=b"k", value=v.encode())
    producer.flush(timeout=10)
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()


def read(bootstrap, isolation, want):
    """(offset, value) pairs from offset 0 until `want` arrived (then SETTLE_S more) or the timeout."""
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
    )
    tp = TopicPartition(TOPIC, 0)
    c.assign([tp])
    c.seek(tp, 0)
    seen = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    settle_until = None
    while time.monotonic() < deadline:
        if len(seen) >= want and settle_until is None:
            settle_until = time.monotonic() + SETTLE_S
        if settle_until is not None and time.monotonic() >= settle_until:
            break
        for records in c.poll(timeout_ms=100).values():
            seen.extend((r.offset, r.value.decode()) for r in records)
    c.close()
    return seen


def main():
    bootstrap = sys.argv[1]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-demo-producer")
    producer.init_transactions()
    transaction(producer, ["c-0", "c-1"], commit=True)
    transaction(producer, ["a-0", "a-1"], commit=False)
    transaction(producer, ["c-2"], commit=True)
    producer.close()
    print(f"read_uncommitted from 0: {read(bootstrap, 'read_uncommitted', 5)}")
    print(f"read_committed from 0: {read(bootstrap, 'read_committed', 3)}")


if __name__ == "__main__":
    main()
