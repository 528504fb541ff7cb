"""The seed document's experiment (bigywater.tech, "Kafka internals 37: Read Committed and Read
Uncommitted"), rewritten from its description and code fragments. The article ran it on three brokers
with a topic of replication factor 3; the optional second argument is the topic's replication factor
(default 1, for one broker), the optional third the topic (default `tx-demo`), which also names the
producer's transactional id and the consumers' groups, so that runs on one cluster do not meet.

A transactional producer writes three records to `tx-demo` and flushes without committing; a
read_uncommitted and a read_committed consumer read what they can; the producer commits and the
read_committed consumer catches up; a second transaction of three records is read by the
read_uncommitted consumer before it is aborted; then fresh consumers of both levels read from offset 0.
It prints exactly the lines the article shows.

Each consumer subscribes in a fresh group, so it starts at offset 0 (`auto.offset.reset=earliest`).

usage: python3 seed_experiment.py HOST:PORT [REPLICATION_FACTOR [TOPIC]]
"""

import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from clients import CALL_TIMEOUT_S, consumer, poll

DEFAULT_TOPIC = "tx-demo"


def main():
    bootstrap = sys.argv[1]
    replication_factor = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    topic_name = sys.argv[3] if len(sys.argv) > 3 else DEFAULT_TOPIC
    # The default topic keeps the names the article's run had (and serve's timeline tests name).
    prefix = "seed" if topic_name == DEFAULT_TOPIC else topic_name
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(topic_name, num_partitions=1, replication_factor=replication_factor)
    admin.create_topics([topic])[topic_name].result(CALL_TIMEOUT_S)

    # The three produces of each transaction wait for the flush and go out as one batch, so the log's batch
    # boundaries are the program's and not the client's timing (the tests compare them with real Kafka's).
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic_name}-producer", "linger.ms": 1000})
    p.init_transactions(CALL_TIMEOUT_S)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic_name, key=b"k", value=f"inflight-{i}".encode())
    p.flush(CALL_TIMEOUT_S)
    # commit_transaction() has not been called yet.
    c_ru = consumer(bootstrap, f"{prefix}-ru", "read_uncommitted", topic_name)
    c_rc = consumer(bootstrap, f"{prefix}-rc", "read_committed", topic_name)
    print(f"read_uncommitted sees (before commit): {poll(c_ru, 3)}")
    print(f"read_committed sees (before commit): {poll(c_rc, 0)}")

    p.commit_transaction(CALL_TIMEOUT_S)
    time.sleep(1.0)
    print(f"read_committed sees (after commit): {poll(c_rc, 3)}")

    p.begin_transaction()
    for i in range(3):
        p.produce(topic_name, key=b"k", value=f"aborted-{i}".encode())
    p.flush(CALL_TIMEOUT_S)
    seen = poll(c_ru, 3)  # not aborted yet
    p.abort_transaction(CALL_TIMEOUT_S)
    print(f"read_uncommitted sees (before abort, transiently): {seen}")
    print(f"read_committed sees (after abort): {poll(c_rc, 0)}  (should be empty)")
    c_ru.close()
    c_rc.close()

    print()
    fresh_ru = consumer(bootstrap, f"{prefix}-fresh-ru", "read_uncommitted", topic_name)
    print("fresh read_uncommitted consumer reading from offset 0 sees ALL raw records:")
    print(f"  {poll(fresh_ru, 6)}")
    fresh_rc = consumer(bootstrap, f"{prefix}-fresh-rc", "read_committed", topic_name)
    print("fresh read_committed consumer reading from offset 0 sees only:")
    print(f"  {poll(fresh_rc, 3)}")
    fresh_ru.close()
    fresh_rc.close()


if __name__ == "__main__":
    main()
