#!/usr/bin/env python3
"""A delaying TCP relay for cluster tests and benchmarks: every byte is forwarded, in order,
half the requested round-trip time later in each direction.

usage: df-relay.py LISTEN_HOST:PORT TARGET_HOST:PORT [--rtt-ms MS]

Prints "df-relay: listening on HOST:PORT" on stdout once accepting (a readiness line for
scripts), then relays until killed. Standard library only (asyncio).
"""
import argparse
import asyncio
import sys
import time


async def pump(reader, writer, delay):
    q = asyncio.Queue()

    async def sender():
        while True:
            due, data = await q.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        try:
            writer.close()
        except Exception:
            pass

    task = asyncio.ensure_future(sender())
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            q.put_nowait((time.monotonic() + delay, data))
    except (ConnectionError, OSError):
        pass
    q.put_nowait((0, None))
    try:
        await task
    except (ConnectionError, OSError):
        pass


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("listen")
    ap.add_argument("target")
    ap.add_argument("--rtt-ms", type=float, default=1.0)
    a = ap.parse_args()
    lh, lp = a.listen.rsplit(":", 1)
    th, tp = a.target.rsplit(":", 1)
    delay = a.rtt_ms / 2000.0

    async def handle(cr, cw):
        try:
            tr, tw = await asyncio.open_connection(th, int(tp))
        except OSError:
            cw.close()
            return
        await asyncio.gather(pump(cr, tw, delay), pump(tr, cw, delay))

    server = await asyncio.start_server(handle, lh, int(lp))
    print("df-relay: listening on %s:%s" % (lh, lp), flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
