#!/usr/bin/env python3
"""Writes a producer-layer scenario of N ops (default 10,000) to stdout, for timing the scenario runner:
one transactional producer over two partitions, transactions of two records that alternate commit and
abort, and a read_committed read after every tenth transaction.

    python3 scripts/long_scenario.py 100000 > /tmp/long.json
    cargo run --release -- scenario /tmp/long.json
"""
import json
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
ops = [{"op": "init_producer", "producer": "p"}]
txn = 0
while len(ops) < n:
    ops.append({"op": "begin", "producer": "p"})
    for partition in (0, 1):
        ops.append({"op": "produce", "producer": "p", "partition": partition, "values": [f"v{txn}.{partition}"]})
    ops.append({"op": "commit" if txn % 2 == 0 else "abort", "producer": "p"})
    if txn % 10 == 9:
        ops.append({"op": "read", "isolation": "read_committed", "partition": 0, "from_offset": 0})
    txn += 1
# The last transaction may be cut short; it then stays open, which the runner handles like any other.
scenario = {"name": f"long-{n}", "layer": "producer", "topics": {"t": 2}, "ops": ops[:n]}
json.dump({"format": "txnsim-scenario/v1", "scenarios": [scenario]}, sys.stdout)
