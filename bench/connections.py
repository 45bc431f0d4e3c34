#!/usr/bin/env python3
"""Opens many connections to a proxy and reports its resident memory.

idle PORT N PID:            N keep-alive connections, one small request each, then idle.
slow PORT N PID SECONDS:    N downloads of /big, each read at 16 KiB per second for SECONDS.
h2idle PORT N PID[,PID..]:  N HTTP/2 connections over TLS (ALPN h2), one GET /1k each, then idle
                            (the memory of every PID given is summed).
Prints the proxy's VmRSS before, after (peak for slow) and the growth per connection.
"""
import asyncio
import resource
import sys


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def open_conn(port, path, sem):
    async with sem:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
        await writer.drain()
        return reader, writer


async def read_small_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)


async def idle(port, n, pid):
    before = rss_kb(pid)
    sem = asyncio.Semaphore(500)
    conns = await asyncio.gather(*(open_conn(port, "/0b", sem) for _ in range(n)))
    await asyncio.gather(*(read_small_response(r) for r, _ in conns))
    await asyncio.sleep(2)
    after = rss_kb(pid)
    print(f"idle keep-alive connections: {n}; proxy RSS {before} kB -> {after} kB; "
          f"{(after - before) * 1024 / n:.0f} bytes per idle connection")
    for _, w in conns:
        w.close()


async def slow(port, n, pid, seconds):
    before = rss_kb(pid)
    sem = asyncio.Semaphore(500)
    conns = await asyncio.gather(*(open_conn(port, "/big", sem) for _ in range(n)))
    peak = before
    got = 0
    for _ in range(seconds):
        for r, _ in conns:
            try:
                got += len(await asyncio.wait_for(r.read(16384), 0.001))
            except asyncio.TimeoutError:
                pass
        peak = max(peak, rss_kb(pid))
        await asyncio.sleep(1)
    print(f"slow downloads: {n} for {seconds}s, {got >> 20} MiB delivered; proxy RSS {before} kB "
          f"-> peak {peak} kB; {(peak - before) * 1024 / n:.0f} bytes per download")
    for _, w in conns:
        w.close()


# The client preface, an empty SETTINGS frame, and GET https://localhost/1k on stream 1
# (HPACK: :method GET, :scheme https, :path literal "/1k", :authority literal "localhost").
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
H2_BLOCK = bytes([0x82, 0x87, 0x44, 3]) + b"/1k" + bytes([0x41, 9]) + b"localhost"
H2_GET = bytes([0, 0, len(H2_BLOCK), 1, 5, 0, 0, 0, 1]) + H2_BLOCK
H2_SETTINGS_ACK = bytes([0, 0, 0, 4, 1, 0, 0, 0, 0])


async def open_h2(port, sem):
    import ssl
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    async with sem:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname="localhost")
        writer.write(H2_PREFACE + H2_SETTINGS_ACK + H2_GET)
        await writer.drain()
        # Read until the response's END_STREAM (a frame with flag 1 on stream 1).
        buf = b""
        while True:
            buf += await asyncio.wait_for(reader.read(65536), 10)
            while len(buf) >= 9:
                length = int.from_bytes(buf[0:3], "big")
                if len(buf) < 9 + length:
                    break
                kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                buf = buf[9 + length:]
                if stream == 1 and kind in (0, 1) and flags & 1:
                    return reader, writer


async def h2idle(port, n, pids):
    before = sum(rss_kb(p) for p in pids)
    # Python's TLS handshakes are slow: opened 100 at a time, or they would outrun the
    # proxies' handshake timeouts.
    sem = asyncio.Semaphore(50)
    conns = []
    for start in range(0, n, 100):
        batch = min(100, n - start)
        conns += await asyncio.gather(*(open_h2(port, sem) for _ in range(batch)))
    await asyncio.sleep(2)
    after = sum(rss_kb(p) for p in pids)
    print(f"{n} idle HTTP/2 TLS connections: proxy RSS {before} kB -> {after} kB; "
          f"{(after - before) / n:.1f} kB per connection")
    for _, w in conns:
        w.close()


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if mode == "h2idle":
        asyncio.run(h2idle(port, n, [int(p) for p in sys.argv[4].split(",")]))
        return
    pid = int(sys.argv[4])
    if mode == "idle":
        asyncio.run(idle(port, n, pid))
    else:
        asyncio.run(slow(port, n, pid, int(sys.argv[5])))


main()
