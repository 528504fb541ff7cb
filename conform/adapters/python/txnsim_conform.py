"""The txnsim-conform/v1 protocol shared by the Python adapters (kafka-python, aiokafka): the request,
the output lines and their framing (docs/conform.md has the contract). Each adapter puts this directory on
sys.path and keeps only its client's read loop."""

import json
import sys

FORMAT = "txnsim-conform/v1"
ISOLATIONS = ("read_committed", "read_uncommitted")


def emit(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def fail(message):
    # The contract's error line is one line: newlines in an exception's text would break it.
    emit({"error": " ".join(str(message).split())})
    sys.exit(1)


def parse_request(line):
    """The request's fields, checked, or a ValueError saying which one is wrong."""
    req = json.loads(line)
    if not isinstance(req, dict):
        raise ValueError("the request is not a JSON object")
    if req.get("format") != FORMAT:
        raise ValueError(f"format is {req.get('format')!r}, this adapter speaks {FORMAT}")
    for key in ("bootstrap", "topic", "isolation"):
        if not isinstance(req.get(key), str):
            raise ValueError(f"{key} is missing or not a string")
    for key in ("partition", "start_offset", "stop_offset", "max_records", "timeout_ms"):
        # bool is an int in Python; true is not an offset.
        if not isinstance(req.get(key), int) or isinstance(req.get(key), bool) or req[key] < 0:
            raise ValueError(f"{key} is missing or not a non-negative integer")
    if req["isolation"] not in ISOLATIONS:
        raise ValueError(f"isolation is {req['isolation']!r}, not one of {', '.join(ISOLATIONS)}")
    return req


def text(raw, what, offset):
    """A key or value as the contract's UTF-8 string; a record whose bytes are not UTF-8 is an error
    (said so, with its offset) rather than a silently altered value."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"the {what} at offset {offset} is not UTF-8: {e}") from None


def record_line(record):
    line = {"offset": record.offset, "value": None if record.value is None else text(record.value, "value", record.offset)}
    if record.key is not None:
        line["key"] = text(record.key, "key", record.offset)
    return line
