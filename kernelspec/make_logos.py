#!/usr/bin/python3
"""Write logo-32x32.png and logo-64x64.png for the nbfork kernelspec.

Stdlib only (zlib + struct): a rounded blue square with a white "C" ring
and a small orange fork tick. Run from this folder: ./make_logos.py
"""
import math
import struct
import zlib


def png(path, size, pixel):
    rows = b"".join(
        b"\x00" + b"".join(bytes(pixel(x, y, size)) for x in range(size)) for y in range(size)
    )

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(rows, 9)))
        f.write(chunk(b"IEND", b""))


def logo(x, y, s):
    u, v = (x + 0.5) / s, (y + 0.5) / s
    # rounded square background
    r = 0.18
    dx, dy = max(abs(u - 0.5) - (0.5 - r), 0), max(abs(v - 0.5) - (0.5 - r), 0)
    if math.hypot(dx, dy) > r:
        return (0, 0, 0, 0)
    # "C": a ring open to the right
    d = math.hypot(u - 0.5, v - 0.5)
    ang = math.degrees(math.atan2(v - 0.5, u - 0.5))
    if 0.22 < d < 0.34 and abs(ang) > 45:
        return (255, 255, 255, 255)
    # fork tick: two prongs at the opening
    if 0.62 < u < 0.82 and (abs(v - 0.42) < 0.04 or abs(v - 0.58) < 0.04):
        return (255, 160, 40, 255)
    return (30, 90, 170, 255)


if __name__ == "__main__":
    for n in (32, 64):
        png(f"logo-{n}x{n}.png", n, logo)
