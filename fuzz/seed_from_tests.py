#!/usr/bin/env python3
"""Writes the fuzz seeds in fuzz/seeds/<target>/ from the byte strings in the tests.

Request heads, response heads and chunked bodies come from the b"..." literals of the unit and
integration tests; configs from the example and the TOML the tests use. Files named crash-* or
regress-* (crashes kept as regression seeds) are left alone. Run from the repository root.
"""
import hashlib
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = ["src/http1", "tests/it", "src/proxy", "src/observe"]
LITERAL = re.compile(rb'b"((?:[^"\\]|\\.)*)"', re.S)
METHODS = (b"GET ", b"POST ", b"PUT ", b"HEAD ", b"OPTIONS ", b"DELETE ", b"CONNECT ", b"PATCH ")


def unescape(raw: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(raw):
        c = raw[i]
        if c != 0x5C:
            out.append(c)
            i += 1
            continue
        n = raw[i + 1 : i + 2]
        if n == b"\n":  # line continuation: skip the newline and leading spaces
            i += 2
            while i < len(raw) and raw[i] in b" \t":
                i += 1
            continue
        simple = {b"r": 13, b"n": 10, b"t": 9, b"0": 0, b"\\": 92, b'"': 34, b"'": 39}
        if n in simple:
            out.append(simple[n])
            i += 2
        elif n == b"x":
            out.append(int(raw[i + 2 : i + 4], 16))
            i += 4
        else:
            out.append(c)
            i += 1
    return bytes(out)


def literals():
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.rs")):
            for m in LITERAL.finditer(path.read_bytes()):
                yield unescape(m.group(1))


def write(target: str, data: bytes) -> None:
    folder = ROOT / "fuzz" / "seeds" / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ("test-" + hashlib.sha1(data).hexdigest()[:16])).write_bytes(data)


def main() -> None:
    for data in set(literals()):
        if data.startswith(METHODS):
            write("request_head", data)
        if data.startswith(b"HTTP/1."):
            for flags in (0, 1, 2, 4):
                write("response_head", bytes([flags]) + data)
        head_end = data.find(b"\r\n\r\n")
        if b"chunked" in data.lower() and head_end >= 0:
            body = data[head_end + 4 :]
            for split in (0, 1, 3, len(body) // 2):
                write("chunked", split.to_bytes(2, "little") + body)
    configs = [ROOT / "examples" / "slipstream.toml"]
    for path in configs:
        write("config", path.read_bytes())
    toml = re.compile(r'r#"(.*?)"#', re.S)
    for path in [ROOT / "src/config/mod.rs", ROOT / "tests/it/support.rs", ROOT / "tests/it/lifecycle.rs"]:
        for m in toml.finditer(path.read_text()):
            if "[[listen]]" in m.group(1) or "[upstreams" in m.group(1):
                write("config", m.group(1).replace("{{", "{").replace("}}", "}").encode())


if __name__ == "__main__":
    main()
