"""A transaction whose partition's leader crashes before the commit, against `serve --brokers 3`.

`crash-demo` is the first topic created, so the controller's striped placement gives its one partition
the replicas 1, 2, 0: broker 1 leads it while broker 0 hosts the coordinators. A transactional producer
writes two records there and flushes (acks=all: all three replicas hold them), prints that it produced,
and waits for a line `crashed` on its stdin: the harness has crashed broker 1 in between (`crash 1` on
serve's stdin), and the controller has elected broker 2. The commit goes to the coordinator on broker
0, whose COMMIT marker goes to the new leader; a read_committed consumer then reads exactly the two
records from broker 2.

With `coordinator` after the address, the harness crashes broker 0 instead, the leader of
`__transaction_state` and so the transaction coordinator: broker 1 takes the log over, loads the open
transaction and coordinates from then on, so the commit goes to broker 1 (the client finds it with
FindCoordinator once broker 0 refuses it) and broker 1 writes the marker to its own partition. Broker 0
also hosts the group coordinator, which does not fail over: the script says `committed` and waits for a
line `restarted` (the harness has run `restart 0`) before its consumer reads.

usage: python3 broker_crash.py HOST:PORT [coordinator]   (then `crashed`, and `restarted`, on stdin)
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
    coordinator = sys.argv[2:] == ["coordinator"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=3)])[TOPIC].result(CALL_TIMEOUT_S)
    print(f"leader of {TOPIC}/0: {leader(admin)}")

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "crash-demo-producer"})
    p.init_transactions(CALL_TIMEOUT_S)
    p.begin_transaction()
    for v in ("c-0", "c-1"):
        p.produce(TOPIC, value=v.encode())
    if p.flush(CALL_TIMEOUT_S) != 0:
        raise SystemExit("the records were not acknowledged")
    print("produced ['c-0', 'c-1'], not committed", flush=True)
    if sys.stdin.readline().strip() != "crashed":
        raise SystemExit("the harness did not say it crashed the leader")

    p.commit_transaction(CALL_TIMEOUT_S)
    print("committed", flush=True)
    if coordinator and sys.stdin.readline().strip() != "restarted":
        raise SystemExit("the harness did not say it restarted the coordinator's broker")
    print(f"leader of {TOPIC}/0: {leader(admin)}")
    c = consumer(bootstrap, "crash-rc", "read_committed", TOPIC)
    print(f"read_committed sees: {poll(c, 2)}")
    c.close()


if __name__ == "__main__":
    main()
