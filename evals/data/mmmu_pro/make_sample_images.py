#!/usr/bin/env python3
"""Writes the two sample images of evals/data/mmmu_pro/sample.jsonl (standard library only):
images/square.png, a red square on white, and images/bars.png, three bars of heights 2, 5 and 3 (blue,
green, orange). Run from the repository root: python3 evals/data/mmmu_pro/make_sample_images.py"""

import os
import struct
import zlib

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "images")


def png(path, width, height, pixel):
    rows = b"".join(b"\x00" + b"".join(bytes(pixel(x, y)) for x in range(width)) for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))  # 8-bit RGB
        f.write(chunk(b"IDAT", zlib.compress(rows, 9)))
        f.write(chunk(b"IEND", b""))


def square(x, y):
    return (220, 30, 30) if 16 <= x < 48 and 16 <= y < 48 else (255, 255, 255)


BARS = [((40, 90, 200), 2), ((40, 160, 70), 5), ((240, 140, 30), 3)]


def bars(x, y):
    k = (x - 8) // 16
    if 0 <= k < 3 and (x - 8) % 16 < 12 and 56 - y <= BARS[k][1] * 10 and y < 56:
        return BARS[k][0]
    return (0, 0, 0) if y == 56 else (255, 255, 255)


os.makedirs(HERE, exist_ok=True)
png(os.path.join(HERE, "square.png"), 64, 64, square)
png(os.path.join(HERE, "bars.png"), 64, 64, bars)
