"""A transaction held open until told to commit, through confluent-kafka: the test reading the log back
meanwhile must wait for the COMMIT marker rather than read a log that lacks it.

The producer writes one record to `open-demo` (created with one partition), flushes, prints `open`,
waits for a line on stdin, commits and prints `committed`.

usage: python3 open_transaction.py HOST:PORT
"""

import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from clients import CALL_TIMEOUT_S

TOPIC = "open-demo"


def main():
    bootstrap = sys.argv[1]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(CALL_TIMEOUT_S)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "open-producer"})
    p.init_transactions(CALL_TIMEOUT_S)
    p.begin_transaction()
    p.produce(TOPIC, value=b"x")
    p.flush(CALL_TIMEOUT_S)
    print("open", flush=True)
    sys.stdin.readline()
    p.commit_transaction(CALL_TIMEOUT_S)
    print("committed", flush=True)


if __name__ == "__main__":
    main()
