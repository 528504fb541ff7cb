"""The txnsim-conform/v1 adapter for kafka-python (see ../README.md and docs/conform.md).

Reads one request line on stdin, reads the one partition it names with a KafkaConsumer that has no group
(assign + seek, no offset commits) at the requested isolation level, and prints the client line, one line
per record that poll() handed over, and the consumer's own position() after its last poll. Everything the
library logs goes to stderr (Python's logging default), so stdout holds only the contract's lines.
"""

import time
from importlib.metadata import version

import os
import sys

# The protocol's shared module, ../python/txnsim_conform.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from txnsim_conform import emit, fail, parse_request, record_line  # noqa: E402

CLIENT = "kafka-python"
# One poll waits at most this long, so that the stop conditions are checked often even when the client
# hands over nothing (a fetch of markers only moves the position without delivering a record).
POLL_SLICE_MS = 200
# position() may need a network round trip when the client has lost its position; it gets at least this
# much even when the read's own time is spent, so that the last line reports rather than times out.
POSITION_FLOOR_MS = 2000


def main():
    started = time.monotonic()
    # The client line comes first whatever follows: the distribution's installed version, which is the
    # pin in requirements.txt.
    emit({"client": CLIENT, "version": version("kafka-python")})
    try:
        req = parse_request(sys.stdin.readline())
    except ValueError as e:
        fail(f"bad request: {e}")
    deadline = started + req["timeout_ms"] / 1000.0

    # Imported after the client line so that an import failure still reports as an error line.
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=req["bootstrap"],
        client_id="txnsim-conform-kafka-python",
        # No group: the read is assign + seek, and nothing is committed anywhere.
        group_id=None,
        enable_auto_commit=False,
        isolation_level=req["isolation"],
        # A start offset outside the log raises instead of quietly moving to one end of it: the
        # request names where the read starts.
        auto_offset_reset="none",
        # A read never creates the topic it was asked about (a wrong name shows as an empty read).
        allow_auto_create_topics=False,
        # The constructor bootstraps eagerly (30 s by default): bounded by the read's own time instead.
        bootstrap_timeout_ms=max(int((deadline - time.monotonic()) * 1000), POSITION_FLOOR_MS),
        # Bytes in, bytes out: the adapter decodes them itself.
        key_deserializer=None,
        value_deserializer=None,
    )
    try:
        tp = TopicPartition(req["topic"], req["partition"])
        consumer.assign([tp])
        consumer.seek(tp, req["start_offset"])
        delivered = 0
        # The client's own position after the seek (no fetch yet): a read asked to stop at or before it
        # polls not at all.
        position = consumer.position(tp, timeout_ms=POSITION_FLOOR_MS)
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if position is None:
                emit({"position": None, "why": "kafka-python's position() returned None: it had no position within the timeout"})
                return
            if position >= req["stop_offset"] or delivered >= req["max_records"] or remaining_ms <= 0:
                break
            batches = consumer.poll(
                timeout_ms=min(POLL_SLICE_MS, remaining_ms), max_records=req["max_records"] - delivered
            )
            # One partition is assigned, so there is one list at most; every record it holds is printed,
            # in the order the client handed them over.
            for records in batches.values():
                for record in records:
                    emit(record_line(record))
                    delivered += 1
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            position = consumer.position(tp, timeout_ms=max(remaining_ms, POSITION_FLOOR_MS))
        emit({"position": position})
    finally:
        # Bounded: close() would otherwise fall back to request_timeout_ms.
        consumer.close(autocommit=False, timeout_ms=1000)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - the contract wants every failure as one error line
        # Most of the clients' exceptions already start with their class's name; the others get it.
        said = str(e)
        fail(said if said.startswith(type(e).__name__) else f"{type(e).__name__}: {said}")
