#!/usr/bin/env python3
"""Holds N long-polls or SSE streams open, to read a gateway's memory per
parked HTTP connection (the load client's `idle` holds WebSockets only).

Usage: hold-http.py PORT PATH_PREFIX N SECONDS
  opens N connections to 127.0.0.1:PORT, sends `GET <PATH_PREFIX><i>` on
  each (for example /poll?uid=u -> /poll?uid=u0, u1, ...), never reads,
  prints "open N" once all are sent, and holds them for SECONDS.
Read the server's PSS (/proc/<pid>/smaps_rollup) before and while it
holds; the gateway needs `[auth] anonymous = true` (the load config).
"""
import asyncio
import resource
import sys


async def main(port, prefix, n, seconds):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    conns = []
    gate = asyncio.Semaphore(200)

    async def one(i):
        async with gate:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            request = f"GET {prefix}{i} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            request += "Accept: text/event-stream\r\n\r\n"
            writer.write(request.encode())
            await writer.drain()
            conns.append((reader, writer))

    await asyncio.gather(*(one(i) for i in range(n)))
    print("open", len(conns), flush=True)
    await asyncio.sleep(seconds)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
