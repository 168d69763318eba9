"""Where a cold pull's time goes, part by part, measured apart from any engine on the very blobs the loopback
registry serves: each layer fetched over HTTP (curl, to nothing), its blob hashed (openssl's sha256, which uses the
CPU's SHA instructions as Go >= 1.21 does and Go 1.19 does not), decompressed (GNU gzip or zstd, one thread, to
nothing), and decompressed into a directory on the engines' own disk (tar, then sync: the unpack). Each part runs
over every layer one after the other, as Docker unpacks them; an engine overlaps its three downloads with the
unpack, so a pull costs at least its largest part and at most their sum."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .cold_engine import blob
from .common import gb, run

DECOMPRESS = {"gzip": "gzip -dc", "zstd": "zstd -dcq", "none": "cat"}
PARTS = ("fetch_s", "sha256_s", "decompress_s", "unpack_s")


def shell(command: str) -> float:
    return run(["bash", "-o", "pipefail", "-c", command])


def measure(pushed: dict, compression: str, registry: Path, scratch: Path) -> dict:
    """The four parts' seconds for one push (its layers as (digest, bytes)), and the bytes it unpacks to."""
    host, _, path = pushed["target"].partition("/")
    repository = path.rsplit(":", 1)[0]
    files = [(digest, blob(registry, digest)) for digest, _ in pushed["layers"]]
    found = dict.fromkeys(PARTS, 0.0)
    tool = DECOMPRESS[compression]
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        for digest, data in files:
            found["fetch_s"] += shell(f"curl -sf -o /dev/null http://{host}/v2/{repository}/blobs/{digest}")
            found["sha256_s"] += shell(f"openssl dgst -sha256 {data} >/dev/null")
            if compression != "none":
                found["decompress_s"] += shell(f"{tool} {data} >/dev/null")
            found["unpack_s"] += shell(f"{tool} {data} | tar -x --warning=none -C {scratch}")
        found["unpack_s"] += shell("sync")
        found["unpacked_bytes"] = int(subprocess.run(["du", "-sb", str(scratch)], capture_output=True, text=True,
                                                     check=True).stdout.split()[0])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        subprocess.run(["sync"], check=False)
    return found


def rows(image: str, parts: dict, pushed: dict) -> list[tuple]:
    out = []
    for compression, found in parts.items():
        layers = sum(size for _, size in pushed[compression]["layers"])
        unpacked = found["unpacked_bytes"]
        out.append((image, compression, gb(layers), gb(unpacked), *(f"{found[part]:.1f}" for part in PARTS),
                    f"{unpacked / 1e6 / found['unpack_s']:.0f}",
                    f"{sum(found[part] for part in ('fetch_s', 'sha256_s', 'unpack_s')):.1f}"))
    return out


HEADER = ("image", "layers", "registry bytes", "unpacked bytes", "fetch s", "sha256 s", "decompress s",
          "decompress + untar + sync s", "unpacked MB/s", "sum of fetch, sha256, unpack s")
