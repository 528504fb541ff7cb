"""A transaction whose partition's leader, or whose coordinator's broker, crashes before the commit,
against `serve --brokers 3`.

`crash-demo` is the first topic created, so the controller's striped placement gives its one partition
the replicas 1, 2, 0: broker 1 leads it while broker 0 leads `__transaction_state` (the transaction
coordinator). A read_committed consumer subscribes first, in group `crash-rc` (whose `__consumer_offsets`
partition 9 broker 1 leads, so the group coordinator is broker 1: the topic is created on this first
lookup, while all three brokers are up). A transactional producer writes two records and flushes
(acks=all: all three replicas hold them), prints that it produced, and waits for a line `crashed` on its
stdin: the harness has crashed a broker in between (`crash N` on serve's stdin). Then it commits, and the
consumer reads exactly the two records.

With broker 1 crashed, the controller elects broker 2 for `crash-demo/0` and for the group's partition:
the coordinator's COMMIT marker goes to broker 2, and the group coordinator moves there too (the consumer
finds it again). With broker 0 crashed, broker 1 takes `__transaction_state` over and coordinates: the
client finds it with FindCoordinator once broker 0 is gone, and broker 1 writes the marker to its own
partition.

usage: python3 broker_crash.py HOST:PORT   (then `crashed` on stdin)
"""

import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from clients import CALL_TIMEOUT_S, consumer, poll

TOPIC = "crash-demo"


def leader(admin):
    return admin.list_topics(TOPIC, timeout=CALL_TIMEOUT_S).topics[TOPIC].partitions[0].leader


def main():
    bootstrap = sys.argv[1]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=3)])[TOPIC].result(CALL_TIMEOUT_S)
    print(f"leader of {TOPIC}/0: {leader(admin)}")
    c = consumer(bootstrap, "crash-rc", "read_committed", TOPIC)

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "crash-demo-producer"})
    p.init_transactions(CALL_TIMEOUT_S)
    p.begin_transaction()
    for v in ("c-0", "c-1"):
        p.produce(TOPIC, value=v.encode())
    if p.flush(CALL_TIMEOUT_S) != 0:
        raise SystemExit("the records were not acknowledged")
    print("produced ['c-0', 'c-1'], not committed", flush=True)
    if sys.stdin.readline().strip() != "crashed":
        raise SystemExit("the harness did not say it crashed a broker")

    p.commit_transaction(CALL_TIMEOUT_S)
    print("committed", flush=True)
    print(f"leader of {TOPIC}/0: {leader(admin)}")
    print(f"read_committed sees: {poll(c, 2)}")
    c.close()


if __name__ == "__main__":
    main()
