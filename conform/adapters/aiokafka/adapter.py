"""The txnsim-conform/v1 adapter for aiokafka (see ../README.md and docs/conform.md).

Reads one request line on stdin, reads the one partition it names with an AIOKafkaConsumer that has no
group (assign + seek, no offset commits) at the requested isolation level, and prints the client line, one
line per record that getmany() handed over, and the consumer's own position() after its last getmany().
Everything the library logs goes to stderr (Python's logging default), so stdout holds only the contract's
lines.
"""

import asyncio
import time
from importlib.metadata import version

import os
import sys

# The protocol's shared module, ../python/txnsim_conform.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from txnsim_conform import emit, fail, parse_request, record_line  # noqa: E402

CLIENT = "aiokafka"
# One getmany() waits at most this long, so that the stop conditions are checked often even when the
# client hands over nothing (a fetch of markers only moves the position without delivering a record).
POLL_SLICE_MS = 200
# position() waits for a position the client may have lost (a reset in flight); it gets at least this
# much even when the read's own time is spent, so that the last line reports rather than hangs.
POSITION_FLOOR_S = 2.0
# stop() is bounded too: the read is over, only the connections are left to close.
STOP_TIMEOUT_S = 2.0


async def position_of(consumer, tp, deadline):
    """The consumer's own position, or None when it has none in time (aiokafka's position() waits for
    one without a bound of its own)."""
    try:
        return await asyncio.wait_for(consumer.position(tp), max(deadline - time.monotonic(), POSITION_FLOOR_S))
    except asyncio.TimeoutError:
        return None


async def read(req, started):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    deadline = started + req["timeout_ms"] / 1000.0
    consumer = AIOKafkaConsumer(
        bootstrap_servers=req["bootstrap"],
        client_id="txnsim-conform-aiokafka",
        # No group: the read is assign + seek, and nothing is committed anywhere.
        group_id=None,
        enable_auto_commit=False,
        isolation_level=req["isolation"],
        # A start offset outside the log raises instead of quietly moving to one end of it: the request
        # names where the read starts.
        auto_offset_reset="none",
        # Bounds the bootstrap's metadata request and every request after it.
        request_timeout_ms=min(max(req["timeout_ms"], 1000), 40000),
    )
    # start() connects and fetches metadata; it is bounded by the read's own time.
    try:
        await asyncio.wait_for(consumer.start(), max(deadline - time.monotonic(), POSITION_FLOOR_S))
    except asyncio.TimeoutError:
        raise RuntimeError(f"start() did not connect to {req['bootstrap']} within the read's timeout") from None
    try:
        tp = TopicPartition(req["topic"], req["partition"])
        consumer.assign([tp])
        consumer.seek(tp, req["start_offset"])
        delivered = 0
        # The client's own position after the seek (no fetch yet): a read asked to stop at or before it
        # polls not at all.
        position = await position_of(consumer, tp, deadline)
        while True:
            if position is None:
                emit({"position": None, "why": "aiokafka's position() had no valid position within the timeout"})
                return
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if position >= req["stop_offset"] or delivered >= req["max_records"] or remaining_ms <= 0:
                break
            batches = await consumer.getmany(
                tp, timeout_ms=min(POLL_SLICE_MS, remaining_ms), max_records=req["max_records"] - delivered
            )
            # One partition is assigned, so there is one list at most; every record it holds is printed,
            # in the order the client handed them over.
            for records in batches.values():
                for record in records:
                    emit(record_line(record))
                    delivered += 1
            position = await position_of(consumer, tp, deadline)
        emit({"position": position})
    finally:
        try:
            await asyncio.wait_for(consumer.stop(), STOP_TIMEOUT_S)
        except asyncio.TimeoutError:
            # The answer is out already; a slow close is not the read's failure, but it is said.
            print("aiokafka: stop() did not finish in time", file=sys.stderr)


def main():
    started = time.monotonic()
    # The client line comes first whatever follows: the distribution's installed version, which is the
    # pin in requirements.txt.
    emit({"client": CLIENT, "version": version("aiokafka")})
    try:
        req = parse_request(sys.stdin.readline())
    except ValueError as e:
        fail(f"bad request: {e}")
    asyncio.run(read(req, started))


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - the contract wants every failure as one error line
        # Most of the clients' exceptions already start with their class's name; the others get it.
        said = str(e)
        fail(said if said.startswith(type(e).__name__) else f"{type(e).__name__}: {said}")
