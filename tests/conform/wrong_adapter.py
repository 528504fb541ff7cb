"""A deliberately wrong txnsim-conform/v1 adapter, for tests/conform.rs: it reads no broker and prints, for
any request, records 0 and 1 and then offset 3 ("x1"), the first record of the aborted transaction of
layout `alternating`, and ends at the request's stop offset."""

import json
import sys

request = json.loads(sys.stdin.readline())
print(json.dumps({"client": "wrong-adapter", "version": "0"}))
for offset, value in [(0, "c1"), (1, "c2"), (3, "x1")]:
    print(json.dumps({"offset": offset, "value": value}))
print(json.dumps({"position": request["stop_offset"]}))
