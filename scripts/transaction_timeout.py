"""A transaction left open past its `transaction.timeout.ms`, through confluent-kafka: the coordinator's
periodic scan aborts it and bumps the producer's epoch, so the late commit is refused as fenced.

The producer (transaction.timeout.ms=1000) writes one record to `tt-demo` and flushes, then waits 3 s,
longer than its timeout plus the coordinator's scan interval (serve is started with a short one), before
it commits. It prints the commit's error and what fresh consumers of both isolation levels read.

usage: python3 transaction_timeout.py HOST:PORT
"""

import sys
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from clients import CALL_TIMEOUT_S, consumer, poll

TOPIC = "tt-demo"
# Past the transaction's 1 s timeout and the scan that finds it.
IDLE_S = 3.0


def read(bootstrap, group, isolation, want):
    c = consumer(bootstrap, group, isolation, TOPIC)
    seen = poll(c, want)
    c.close()
    return seen


def main():
    bootstrap = sys.argv[1]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(CALL_TIMEOUT_S)

    p = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": "tt-producer",
        "transaction.timeout.ms": 1000,
    })
    p.init_transactions(CALL_TIMEOUT_S)
    p.begin_transaction()
    p.produce(TOPIC, value=b"late")
    p.flush(CALL_TIMEOUT_S)
    time.sleep(IDLE_S)
    try:
        p.commit_transaction(CALL_TIMEOUT_S)
        print("commit: ok")
    except KafkaException as e:
        err = e.args[0]
        print(f"commit: {err.name()} (fatal: {err.fatal()})")
    print(f"read_uncommitted from 0: {read(bootstrap, 'tt-ru', 'read_uncommitted', 1)}")
    print(f"read_committed from 0: {read(bootstrap, 'tt-rc', 'read_committed', 0)}")


if __name__ == "__main__":
    main()
