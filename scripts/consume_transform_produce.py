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

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clients import CALL_TIMEOUT_S, consumer, poll, take

IN, OUT, GROUP = "ctp-in", "ctp-out", "ctp-group"
# Offsets are committed only with the transactions.
NO_AUTO_COMMIT = {"enable.auto.commit": False}


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

    source = consumer(bootstrap, GROUP, "read_committed", IN, **NO_AUTO_COMMIT)
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

    resumed = consumer(bootstrap, GROUP, "read_committed", IN, **NO_AUTO_COMMIT)
    print(f"a new member of {GROUP} resumes with: {poll(resumed, 2)}")
    resumed.close()
    rc = consumer(bootstrap, "ctp-check-rc", "read_committed", OUT)
    print(f"read_committed on {OUT}: {poll(rc, 2)}")
    rc.close()
    ru = consumer(bootstrap, "ctp-check-ru", "read_uncommitted", OUT)
    print(f"read_uncommitted on {OUT}: {poll(ru, 4)}")
    ru.close()


if __name__ == "__main__":
    main()
