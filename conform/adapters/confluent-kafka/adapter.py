"""txnsim-conform/v1 adapter for librdkafka through confluent-kafka (docs/conform.md): reads one partition
with no consumer group (assign at the start offset, no commits) and prints every message the client hands
the application, then its position."""

import json
import sys
import time

import confluent_kafka
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, TopicPartition


def out(obj):
    print(json.dumps(obj), flush=True)


def main():
    req = json.loads(sys.stdin.readline())
    out({"client": "confluent-kafka", "version": f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"})
    if req.get("format") != "txnsim-conform/v1":
        out({"error": f"unknown request format {req.get('format')!r}"})
        return 1
    consumer = Consumer({
        "bootstrap.servers": req["bootstrap"],
        # librdkafka wants a group id; assign() joins no group and nothing is committed under it.
        "group.id": "txnsim-conform-unused",
        "isolation.level": req["isolation"],
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # Reading below the log start or past the end is an error here, never a silent reset.
        "auto.offset.reset": "error",
    })
    tp = TopicPartition(req["topic"], req["partition"], req["start_offset"])
    consumer.assign([tp])
    deadline = time.monotonic() + req["timeout_ms"] / 1000
    delivered = 0
    position = None
    while delivered < req["max_records"] and time.monotonic() < deadline:
        if position is not None and position >= req["stop_offset"]:
            break
        wait = max(0.0, min(0.2, deadline - time.monotonic()))
        for msg in consumer.consume(num_messages=req["max_records"] - delivered, timeout=wait):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                out({"error": str(msg.error())})
                return 1
            try:
                record = {"offset": msg.offset(), "value": (msg.value() or b"").decode("utf-8")}
                if msg.key() is not None:
                    record["key"] = msg.key().decode("utf-8")
            except UnicodeDecodeError:
                # Never a changed value: the contract's values are UTF-8 text.
                out({"error": f"offset {msg.offset()}: the key or value is not UTF-8"})
                return 1
            out(record)
            delivered += 1
        # librdkafka's position: the offset after the last message the application got (rd_kafka_position).
        offset = consumer.position([TopicPartition(req["topic"], req["partition"])])[0].offset
        position = None if offset == OFFSET_INVALID else offset
    consumer.close()
    if position is None:
        out({"position": None, "why": "librdkafka reports no position (OFFSET_INVALID) until a message is consumed"})
    else:
        out({"position": position})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # the contract's one-line error, with exit 1
        out({"error": f"{type(e).__name__}: {e}".replace("\n", " ")})
        sys.exit(1)
