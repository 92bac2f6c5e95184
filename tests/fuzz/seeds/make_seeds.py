#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# make_seeds.py - write the seed inputs of fuzz_unpack, fuzz_runlayer, fuzz_proto, fuzz_load, fuzz_bundle
# and fuzz_agentlink (small files kept in the repo beside this script; run it again after
# changing it: python3 make_seeds.py).
# Seeds get libFuzzer past format detection: without them fuzz_unpack never reached the tar
# reader. Each one is an input a real image or agent could send.
import gzip
import io
import json
import os
import struct
import subprocess
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))


def tar_bytes(members, fmt=tarfile.GNU_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for m in members:
            kind, name = m[0], m[1]
            ti = tarfile.TarInfo(name)
            ti.mtime = 1000000000
            if kind == "file":
                data = m[2]
                ti.size = len(data)
                ti.mode = m[3] if len(m) > 3 else 0o644
                t.addfile(ti, io.BytesIO(data))
            elif kind == "dir":
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                t.addfile(ti)
            elif kind == "sym":
                ti.type = tarfile.SYMTYPE
                ti.linkname = m[2]
                t.addfile(ti)
            elif kind == "hard":
                ti.type = tarfile.LNKTYPE
                ti.linkname = m[2]
                t.addfile(ti)
            elif kind == "fifo":
                ti.type = tarfile.FIFOTYPE
                t.addfile(ti)
            elif kind == "chr":
                ti.type = tarfile.CHRTYPE
                ti.devmajor, ti.devminor = 1, 3
                t.addfile(ti)
    return buf.getvalue()


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def unpack_seeds():
    basic = tar_bytes([("dir", "etc"), ("file", "etc/hello", b"hi\n"),
                       ("file", "usr/bin/tool", b"\x7fELF", 0o4755),
                       ("hard", "usr/bin/hard", "usr/bin/tool"),
                       ("sym", "usr/bin/link", "tool"), ("dir", "tmp")])
    write("fuzz_unpack", "plain.tar", basic)
    write("fuzz_unpack", "plain.tar.gz", gzip.compress(basic, mtime=0))
    try:
        zst = subprocess.run(["zstd", "-q", "-c"], input=basic, capture_output=True,
                             check=True).stdout
        write("fuzz_unpack", "plain.tar.zst", zst)
    except (OSError, subprocess.CalledProcessError):
        pass
    write("fuzz_unpack", "whiteouts.tar",
          tar_bytes([("dir", "etc"), ("file", "etc/.wh.old", b""),
                     ("dir", "var/lib"), ("file", "var/lib/.wh..wh..opq", b""),
                     ("file", "var/lib/new", b"n")]))
    long = "d/" + "x" * 200 + "/" + "y" * 120
    write("fuzz_unpack", "longnames_gnu.tar",
          tar_bytes([("file", long, b"long"), ("sym", "l", "z" * 150)]))
    write("fuzz_unpack", "longnames_pax.tar",
          tar_bytes([("file", long, b"long"), ("hard", "h", long)], fmt=tarfile.PAX_FORMAT))
    write("fuzz_unpack", "escapes.tar",
          tar_bytes([("sym", "up", "../../.."), ("file", "up/etc/passwd", b"x"),
                     ("file", "../outside", b"x"), ("file", "/abs", b"x"),
                     ("hard", "hl", "../../etc/shadow"), ("fifo", "f"), ("chr", "null")]))
    # fuzz_runlayer reads what a RUN step's guest sends back: plain tars, whiteouts.
    for name in ("plain.tar", "whiteouts.tar", "longnames_pax.tar", "escapes.tar"):
        with open(os.path.join(HERE, "fuzz_unpack", name), "rb") as f:
            write("fuzz_runlayer", name, f.read())


def frame(ftype, fid, payload, flags=0):
    return struct.pack("<IHHI", len(payload), ftype, flags, fid) + payload


def proto_seeds():
    j = lambda o: json.dumps(o).encode()
    for mode in range(4):
        stream = (frame(1, 0, j({"proto": 1, "agent": "0.1", "kernel": "6.1"})) +
                  frame(3, 7, j({"ok": True, "containers": []})) +
                  frame(5, 9, b"hello\n") + frame(6, 9, b"oops\n") +
                  frame(5, 9, b"", flags=1) +
                  frame(8, 9, j({"code": 0, "signal": 0, "oom": False})) +
                  frame(9, 0, j({"event": "limit", "container": "abc", "limit": "memory"})) +
                  frame(10, 3, b"ping") + frame(7, 9, struct.pack("<I", 65536)) +
                  frame(12, 9, struct.pack("<I", 15)))
        write("fuzz_proto", "session_mode%d" % mode, struct.pack("<I", 0x9e3779b9 + mode) +
              stream)
    write("fuzz_proto", "dup_keys", struct.pack("<I", 3) +
          frame(3, 1, b'{"ok":true,"ok":false}'))
    write("fuzz_proto", "big_data", struct.pack("<I", 2) + frame(5, 1, b"A" * 40000))


def agentlink_seeds():
    """fuzz_agentlink: the stream a hostile agent writes; requests 1-3 wait, streams 2
    and 3 are open (fuzz_agentlink.c)."""
    j = lambda o: json.dumps(o).encode()
    hello = frame(1, 0, j({"proto": 1, "agent": "0.1", "kernel": "6.1"}))
    write("fuzz_agentlink", "session", hello +
          frame(3, 1, j({"ok": True, "containers": []})) +
          frame(5, 2, b"hello\n") + frame(6, 2, b"oops\n") + frame(5, 2, b"", flags=1) +
          frame(7, 2, struct.pack("<I", 65536)) +
          frame(8, 2, j({"code": 0, "signal": 0, "oom": False})) +
          frame(9, 0, j({"event": "limit", "container": "0123456789ab", "limit": "memory"})) +
          frame(10, 3, b"ping") + frame(11, 3, b"pong"))
    # output past the window (cut off), then more for the cut stream and an EXIT after it
    write("fuzz_agentlink", "overrun", hello +
          b"".join(frame(5, 3, b"O" * 32768) for _ in range(10)) +
          frame(6, 3, b"late") + frame(8, 3, j({"code": 3})))
    # answers nobody asked for, frames the guest may not send, a second HELLO
    write("fuzz_agentlink", "unknown_ids", hello +
          frame(3, 99, j({"ok": True})) + frame(3, 1, b"not json") + frame(3, 1, j({"ok": 1})) +
          frame(5, 77, b"x") + frame(8, 77, j({"code": 1})) + frame(7, 77, struct.pack("<I", 1)) +
          frame(2, 1, j({"op": "exec"})) + frame(4, 2, b"in") +
          frame(12, 2, struct.pack("<I", 9)) + frame(1, 0, b"[1,2]"))
    # EXIT info with keys and values exit_info_clean must drop or cut
    write("fuzz_agentlink", "exit_junk", hello +
          frame(8, 2, j({"code": 999, "signal": -4, "oom": "yes", "error": "\x1b[2J" + "e" * 500,
                         "extra": {"deep": [1, 2, 3]}})) +
          frame(8, 3, b'{"code":1,"code":2}') + frame(7, 3, struct.pack("<I", 0xffffffff)))
    # a big PING (the PONG must not stall the reader), then a header that breaks framing
    write("fuzz_agentlink", "ping_then_bad", hello + frame(10, 5, b"P" * 200000) +
          struct.pack("<IHHI", 1 << 30, 5, 0, 2))


def blob(data):
    import hashlib
    return hashlib.sha256(data).hexdigest(), data


def archive(members):
    """A tar of (name, bytes) members, as `image load` reads OCI archives and docker save."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 1000000000
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def load_seeds():
    layer = tar_bytes([("file", "hello", b"hi\n")], fmt=tarfile.USTAR_FORMAT)
    lhex, _ = blob(layer)
    cfg = json.dumps({"architecture": "amd64", "os": "linux",
                      "config": {"Cmd": ["/hello"], "Env": ["A=1"]},
                      "rootfs": {"type": "layers", "diff_ids": ["sha256:" + lhex]}}).encode()
    chex, _ = blob(cfg)
    man = json.dumps({"schemaVersion": 2,
                      "mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                 "digest": "sha256:" + chex, "size": len(cfg)},
                      "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                  "digest": "sha256:" + lhex, "size": len(layer)}]}).encode()
    mhex, _ = blob(man)
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json",
         "digest": "sha256:" + mhex, "size": len(man),
         "platform": {"architecture": "amd64", "os": "linux"},
         "annotations": {"org.opencontainers.image.ref.name": "1.0"}}]}).encode()
    layout = b'{"imageLayoutVersion":"1.0.0"}'
    oci = [("oci-layout", layout), ("index.json", index),
           ("blobs/sha256/" + mhex, man), ("blobs/sha256/" + chex, cfg),
           ("blobs/sha256/" + lhex, layer)]
    write("fuzz_load", "oci_archive.tar", archive(oci))
    write("fuzz_load", "oci_archive_bad_digest.tar",
          archive(oci[:4] + [("blobs/sha256/" + lhex, layer[:-1] + b"x")]))
    dcfg_hex, _ = blob(cfg)
    dman = json.dumps([{"Config": dcfg_hex + ".json", "RepoTags": ["seed/docker:1"],
                        "Layers": ["l1/layer.tar"]}]).encode()
    write("fuzz_load", "docker_save.tar",
          archive([("manifest.json", dman), (dcfg_hex + ".json", cfg), ("l1/layer.tar", layer)]))


def bundle_seeds():
    """kosa8 bundles (src/daemon/bundle_read.c): a whole one, and one refused per rule."""
    import hashlib
    kernel, man = b"\x7fELF kernel" * 20, b'{"kernel": "vmlinux"}'
    model = b"GGUF\x03\x00\x00\x00" + b"\x00" * 40
    msha = hashlib.sha256(model).hexdigest()

    def part(path, data, kind):
        return {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                "kind": kind}
    members = [("guest/vmlinux", kernel), ("guest/manifest.json", man),
               ("models/sha256-" + msha, model)]
    parts = [part(p, d, p.split("/")[0]) for p, d in members]

    def manifest(ps):
        return ("manifest.json", json.dumps({"kosa8_bundle": 1, "created": 1000000000,
                                             "parts": ps, "models": [], "images": []}).encode())
    write("fuzz_bundle", "whole.k8b", archive([manifest(parts)] + members))
    write("fuzz_bundle", "bad_digest.k8b",
          archive([manifest(parts)] + members[:2] + [(members[2][0], model[:-1] + b"x")]))
    write("fuzz_bundle", "cut_short.k8b", archive([manifest(parts)] + members[:2]))
    write("fuzz_bundle", "twice.k8b", archive([manifest(parts)] + members + members[:1]))
    write("fuzz_bundle", "escape.k8b",
          archive([manifest(parts + [part("models/../../etc/x", b"x", "model")])] + members))


if __name__ == "__main__":
    unpack_seeds()
    proto_seeds()
    load_seeds()
    bundle_seeds()
    agentlink_seeds()
