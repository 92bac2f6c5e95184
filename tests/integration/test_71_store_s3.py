# SPDX-License-Identifier: Apache-2.0
"""test_71_store_s3.py - kosa8's S3 client and chunk store (src/store/) against a real S3
server, s3rver 3.7.1 on loopback with every request's SigV4 signature checked by the AWS
SDK's own signer, and the official AWS client reading the bucket back on its own. No VM:
build/tools/k8s3 drives the same code kosa8d uses.

What is shown: objects put and read back in both addressings and over https with a CA
file of its own; a wrong secret refused by the signature check; 500s retried; a multipart
upload cut half-way taken up from its journal, sending only the parts it lacked; a ranged
download; snapshots deduplicated (a second push sends nothing); an encrypted store's
objects are ciphertext under names that are not the content's SHA-256; a chunk the bucket
changed refused with its id and file named; gc removing only what no manifest names; a
snapshot push cut short resumed."""
import hashlib
import json
import os
import subprocess
import tempfile

import pytest

from storekit import (S3Server, aws, aws_get, aws_keys, aws_put, k8s3, open_plain,
                      seal_plain)


@pytest.fixture(scope="module")
def s3():
    s = S3Server()
    yield s
    s.stop()


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="k8t71-", dir="/tmp")
    yield d
    subprocess.run(["rm", "-rf", d])


def rand_file(path, size, seed):
    """size bytes that compress a little (as a memory image does), from a seed."""
    h = hashlib.sha256(seed.encode()).digest()
    block = (h * 2048)[:65536]
    with open(path, "wb") as f:
        left = size
        i = 0
        while left > 0:
            b = hashlib.sha256(h + i.to_bytes(8, "little")).digest() * 8 + block[256:4096]
            b = b[:min(left, len(b))]
            f.write(b)
            left -= len(b)
            i += 1
    return path


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_objects_both_addressings_signed(s3, tmp):
    f = rand_file(os.path.join(tmp, "f"), 3_000_000, "a")
    before = s3.stats()
    out = json.loads(k8s3(s3, "put", "raw/path-style", f).stdout)
    assert out["sent"] == 3_000_000
    # virtual-hosted: BUCKET.s3.localhost (libcurl resolves *.localhost to loopback)
    vh = {"K8S3_ENDPOINT": "http://s3.localhost:%d" % s3.port, "K8S3_PATH_STYLE": "0"}
    k8s3(s3, "put", "raw/virtual", f, env=vh)
    got = os.path.join(tmp, "g")
    k8s3(s3, "get", "raw/virtual", got, env=vh)
    assert sha(got) == sha(f)
    # the AWS client reads both back as they were written
    keys = aws_keys(s3, "raw/")
    assert keys["raw/path-style"] == 3_000_000 and keys["raw/virtual"] == 3_000_000
    assert hashlib.sha256(aws_get(s3, "raw/path-style")).hexdigest() == sha(f)
    head = json.loads(k8s3(s3, "head", "raw/virtual").stdout)
    assert head["bytes"] == 3_000_000
    k8s3(s3, "rm", "raw/virtual")
    assert "raw/virtual" not in aws_keys(s3, "raw/")
    st = s3.stats()
    assert st["refused"] == before["refused"], st["refusals"]
    # a wrong secret: the signature check refuses it, as S3 does
    p = k8s3(s3, "head", "raw/path-style", env={"K8S3_SECRET": "not-it", "K8S3_RETRIES": "0"},
             check=False)
    assert p.returncode != 0 and "access denied" in p.stderr, p.stderr
    assert s3.stats()["refused"] == st["refused"] + 1


def test_https_with_ca_file(tmp):
    ca_key, ca = os.path.join(tmp, "ca.key"), os.path.join(tmp, "ca.pem")
    key, csr, cert = (os.path.join(tmp, n) for n in ("srv.key", "srv.csr", "srv.pem"))
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=k8 test CA")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1")
    ext = os.path.join(tmp, "ext")
    open(ext, "w").write("subjectAltName=IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", cert, "-days", "2", "-extfile", ext)
    srv = S3Server(tls=(key, cert))
    try:
        f = rand_file(os.path.join(tmp, "f"), 100_000, "tls")
        out = k8s3(srv, "put", "tls/x", f, env={"K8S3_CA": ca})
        assert json.loads(out.stdout)["sent"] == 100_000
        # without the CA file the system's CAs do not know this server: refused
        p = k8s3(srv, "put", "tls/y", f, env={"K8S3_RETRIES": "0"}, check=False)
        assert p.returncode != 0 and ("certificate" in p.stderr.lower() or
                                      "SSL" in p.stderr), p.stderr
    finally:
        srv.stop()


def test_retries_on_500(s3, tmp):
    f = rand_file(os.path.join(tmp, "f"), 50_000, "r")
    k8s3(s3, "put", "retry/x", f)
    s3.fault("500", "GET", after=0, count=2)
    out = json.loads(k8s3(s3, "get", "retry/x", os.path.join(tmp, "g"),
                          env={"K8S3_RETRIES": "3"}).stdout)
    s3.fault("none")
    assert out["retries"] >= 2 and sha(os.path.join(tmp, "g")) == sha(f)


def test_multipart_cut_and_resumed(s3, tmp):
    size = 23 * 1024 * 1024 + 12345            # five parts of 5 MiB
    f = rand_file(os.path.join(tmp, "big"), size, "mp")
    journal = os.path.join(tmp, "big.journal")
    # the server drops every PUT after the first two parts (the upload's own POST is not one)
    s3.fault("drop", "PUT", after=2)
    p = k8s3(s3, "put", "mp/big", f, "5", journal, env={"K8S3_RETRIES": "1"}, check=False)
    s3.fault("none")
    assert p.returncode != 0, p.stdout
    j = json.load(open(journal))
    assert sorted(j["parts"]) == ["1", "2"], j          # what the server confirmed
    assert "mp/big" not in aws_keys(s3, "mp/")
    # again: s3rver has no ListParts, so the journal says what is there; three parts go
    out = json.loads(k8s3(s3, "put", "mp/big", f, "5", journal).stdout)
    print("multipart resumed: %d of %d bytes sent again" % (out["sent"], size))
    assert out["sent"] == size - 2 * 5 * 1024 * 1024
    assert not os.path.exists(journal)
    assert hashlib.sha256(aws_get(s3, "mp/big")).hexdigest() == sha(f)
    # a ranged read of it
    part = os.path.join(tmp, "part")
    k8s3(s3, "get", "mp/big", part, str(7_000_000), "1000")
    assert open(part, "rb").read() == open(f, "rb").read()[7_000_000:7_001_000]


def snap_env(**kw):
    e = {"K8S3_CHUNK_KIB": "256", "K8S3_THREADS": "4"}
    e.update(kw)
    return e


def test_snapshots_dedup_and_gc(tmp):
    srv = S3Server(bucket="plain")
    try:
        a = rand_file(os.path.join(tmp, "a.img"), 4 * 1024 * 1024, "snap-a")
        b = os.path.join(tmp, "b.img")
        with open(b, "wb") as f:          # sparse: data at 3 MiB, holes elsewhere
            f.truncate(8 * 1024 * 1024)
            f.seek(3 * 1024 * 1024)
            f.write(open(a, "rb").read(300_000))
        first = json.loads(k8s3(srv, "snap-push", "s1", a, b, env=snap_env()).stdout)
        again = json.loads(k8s3(srv, "snap-push", "s1", a, b, env=snap_env()).stdout)
        # b's chunk at 3 MiB is a's first chunk: sent once
        assert first["chunks"] == 16 + 2 and first["chunks_sent"] == first["chunks"] - 1
        assert again["chunks_sent"] == 0 and again["sent"] == 0, again
        # the holes were never chunks
        assert first["data"] < first["bytes"]
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        pulled = json.loads(k8s3(srv, "snap-pull", "s1", out, env=snap_env()).stdout)
        assert (pulled["chunks"], pulled["chunks_sent"]) == (18, 17)    # the twin once
        assert sha(os.path.join(out, "a.img")) == sha(a)
        assert sha(os.path.join(out, "b.img")) == sha(b)
        assert os.stat(os.path.join(out, "b.img")).st_blocks * 512 < 2 * 1024 * 1024
        # s2 shares a.img's chunks; s1's manifest removed by hand; gc keeps what s2 names
        k8s3(srv, "snap-push", "s2", a, env=snap_env())
        man = [k for k in aws_keys(srv, "manifests/")]
        assert len(man) == 2
        s1 = json.loads(open_plain(aws_get(srv, man[0])))
        s1key = man[0] if s1["sandbox"] == "s1" else man[1]
        aws(srv, "rm", s1key)
        nchunks = len(aws_keys(srv, "chunks/"))
        gc = json.loads(k8s3(srv, "snap-gc", "0", env=snap_env()).stdout)
        assert gc["manifests"] == 1 and gc["removed"] == nchunks - gc["live"] > 0, gc
        assert len(aws_keys(srv, "chunks/")) == gc["live"]
        out2 = os.path.join(tmp, "out2")
        os.mkdir(out2)
        k8s3(srv, "snap-pull", "s2", out2, env=snap_env())
        assert sha(os.path.join(out2, "a.img")) == sha(a)
    finally:
        srv.stop()


def test_encrypted_store_is_ciphertext(tmp):
    srv = S3Server(bucket="secret")
    key = os.urandom(32).hex()
    try:
        marker = b"KOSA8-PLAINTEXT-MARKER-" * 40
        data = (marker + os.urandom(2000)) * 300        # compresses, shows the marker
        a = os.path.join(tmp, "a.img")
        open(a, "wb").write(data)
        k8s3(srv, "snap-push", "enc", a, env=snap_env(K8S3_KEY=key))
        chunks = aws_keys(srv, "chunks/")
        assert chunks
        # the AWS client's view: every object is ciphertext, no name is a content's SHA-256
        plain_ids = {hashlib.sha256(data[i:i + 256 * 1024]).hexdigest()
                     for i in range(0, len(data), 256 * 1024)}
        for k in list(chunks) + list(aws_keys(srv, "manifests/")):
            obj = aws_get(srv, k)
            assert obj[:5] == b"K8C1\x01", k
            assert b"KOSA8-PLAINTEXT" not in obj and b"enc" not in obj[5:40]
            assert k.split("/")[1] not in plain_ids
        named = "manifests/" + hashlib.sha256(b"manifest\0paused\0enc").hexdigest()
        assert named not in aws_keys(srv, "manifests/")
        # the right key reads it back; another key is refused at the marker
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        k8s3(srv, "snap-pull", "enc", out, env=snap_env(K8S3_KEY=key))
        assert open(os.path.join(out, "a.img"), "rb").read() == data
        p = k8s3(srv, "snap-pull", "enc", out, env=snap_env(K8S3_KEY=os.urandom(32).hex()),
                 check=False)
        assert p.returncode != 0 and "another key" in p.stderr, p.stderr
    finally:
        srv.stop()


def test_changed_chunk_refused_naming_it(tmp):
    srv = S3Server(bucket="tamper")
    try:
        a = rand_file(os.path.join(tmp, "a.img"), 1024 * 1024, "tamper")
        k8s3(srv, "snap-push", "t", a, env=snap_env())
        keys = sorted(aws_keys(srv, "chunks/"))
        victim = keys[1]
        good = open_plain(aws_get(srv, victim))
        # another chunk's valid object under this one's name
        aws_put(srv, victim, seal_plain(good[::-1]))
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        p = k8s3(srv, "snap-pull", "t", out, env=snap_env(), check=False)
        assert p.returncode != 0
        assert victim.split("/")[1] in p.stderr and "a.img" in p.stderr, p.stderr
        assert "does not match its id" in p.stderr, p.stderr
        # garbage where the frame should be: refused by the decoder, named as well
        aws_put(srv, victim, b"K8C1\0" + os.urandom(5000))
        p = k8s3(srv, "snap-pull", "t", out, env=snap_env(), check=False)
        assert p.returncode != 0 and victim.split("/")[1] in p.stderr, p.stderr
    finally:
        srv.stop()


def test_push_cut_short_is_resumed(tmp):
    srv = S3Server(bucket="resume")
    try:
        a = rand_file(os.path.join(tmp, "a.img"), 6 * 1024 * 1024, "resume")
        k8s3(srv, "snap-gc", "3600", env=snap_env())    # the store's marker, first
        # 24 chunks of 256 KiB; the server drops every PUT after the 8th
        srv.fault("drop", "PUT", after=8)
        p = k8s3(srv, "snap-push", "r", a, env=snap_env(K8S3_RETRIES="0"), check=False)
        srv.fault("none")
        assert p.returncode != 0
        assert not aws_keys(srv, "manifests/")          # no manifest: nothing half-made
        had = len(aws_keys(srv, "chunks/"))
        assert had == 8
        out = json.loads(k8s3(srv, "snap-push", "r", a, env=snap_env()).stdout)
        print("push resumed: %d of %d chunks sent again" % (out["chunks_sent"], out["chunks"]))
        assert out["chunks_sent"] == out["chunks"] - had
    finally:
        srv.stop()
