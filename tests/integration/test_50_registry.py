# SPDX-License-Identifier: Apache-2.0
# Pulling from a real registry: Debian's docker-registry (distribution 2.8) on 127.0.0.1,
# the python test image pushed with skopeo, pulls through the daemon API.
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import warnings

import pytest

from conftest import BIN, new_home, wait_for

KOSA8D = os.path.join(BIN, "kosa8d")
TAG = "3.12-slim"

pytestmark = pytest.mark.skipif(not shutil.which("docker-registry") or not shutil.which("skopeo"),
                                reason="docker-registry and skopeo are needed (apt-get install "
                                       "docker-registry skopeo)")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class UnixConn(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("kosa8", timeout=timeout)
        self.sock_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.sock_path)
        self.sock = s


def api(home, method, path, body=None, timeout=600):
    c = UnixConn(os.path.join(home, "kosa8d.sock"), timeout)
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode()
    finally:
        c.close()
    if r.getheader("Content-Type", "").startswith("application/x-ndjson"):
        return [json.loads(x) for x in data.splitlines() if x.strip()]
    return json.loads(data) if data else None


def pull(home, image, timeout=600):
    """(result or None, error or None, progress lines, seconds)."""
    t0 = time.monotonic()
    lines = api(home, "POST", "/v1/images/pull", {"image": image}, timeout=timeout)
    dt = time.monotonic() - t0
    last = lines[-1] if lines else {}
    return last.get("result"), last.get("error"), [x["progress"] for x in lines
                                                  if "progress" in x], dt


class Daemon:
    """A kosa8d of its own (own store), run in the foreground and stopped with SIGTERM."""

    def __init__(self, env_extra=None):
        self.home = new_home("k8r-")
        env = dict(os.environ, KOSA8_HOME=self.home)
        env.pop("KOSA8_OFFLINE", None)
        env.update(env_extra or {})
        self.log = open(os.path.join(self.home, "test-kosa8d.log"), "w")
        self.proc = subprocess.Popen([KOSA8D, "--home", self.home, "--foreground"], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        sock = os.path.join(self.home, "kosa8d.sock")

        def up():
            if self.proc.poll() is not None:
                raise AssertionError("kosa8d exited: " + open(self.log.name).read())
            try:
                return api(self.home, "GET", "/v1/images", timeout=5) is not None
            except OSError:
                return False
        assert wait_for(lambda: os.path.exists(sock) and up(), 60), "kosa8d did not start"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if os.environ.get("KOSA8_KEEP_HOME") is None:
            shutil.rmtree(self.home, ignore_errors=True)

    def store(self):
        root = os.path.join(self.home, "images")
        refs = {}
        if os.path.exists(os.path.join(root, "refs.json")):
            with open(os.path.join(root, "refs.json")) as f:
                refs = json.load(f)
        blobs = sorted(os.listdir(os.path.join(root, "blobs", "sha256")))
        tmp = os.listdir(os.path.join(root, "tmp"))
        return refs, blobs, tmp


class Registry:
    """docker-registry serve on a free 127.0.0.1 port, storage in a temp dir."""

    def __init__(self, htpasswd=None):
        self.dir = new_home("k8reg-")
        self.port = free_port()
        self.root = os.path.join(self.dir, "data")
        auth = ""
        if htpasswd:
            hp = os.path.join(self.dir, "htpasswd")
            with open(hp, "w") as f:
                f.write(htpasswd)
            auth = "auth:\n  htpasswd:\n    realm: kosa8-test\n    path: %s\n" % hp
        cfg = os.path.join(self.dir, "config.yml")
        with open(cfg, "w") as f:
            f.write("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                    "    rootdirectory: %s\n%shttp:\n  addr: 127.0.0.1:%d\n"
                    % (self.root, auth, self.port))
        self.log = open(os.path.join(self.dir, "registry.log"), "w")
        self.proc = subprocess.Popen(["docker-registry", "serve", cfg], stdout=self.log,
                                     stderr=subprocess.STDOUT)

        def up():
            if self.proc.poll() is not None:
                raise AssertionError("docker-registry exited: " + open(self.log.name).read())
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/v2/")
                c.getresponse().read()
                c.close()
                return True
            except OSError:
                return False
        assert wait_for(up, 30), "docker-registry did not start"
        self.host = "127.0.0.1:%d" % self.port
        self.image = "%s/library/python:%s" % (self.host, TAG)

    def push(self, layout, creds=None):
        args = ["skopeo", "copy", "--dest-tls-verify=false"]
        if creds:
            args += ["--dest-creds", creds]
        p = subprocess.run(args + ["oci:%s:%s" % (layout, TAG), "docker://" + self.image],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def made_by(cls):
    """A fixture's factory of `cls` objects, each stopped when the test ends."""
    made = []

    def make(**kw):
        made.append(cls(**kw))
        return made[-1]
    yield make
    for m in made:
        m.stop()


@pytest.fixture
def registry():
    yield from made_by(Registry)


@pytest.fixture
def daemon():
    yield from made_by(Daemon)


def layout_manifest(layout):
    with open(os.path.join(layout, "index.json")) as f:
        idx = json.load(f)
    dg = idx["manifests"][0]["digest"]
    with open(os.path.join(layout, "blobs", "sha256", dg[7:])) as f:
        return dg, json.load(f)


def test_pull_by_tag_digest_and_cached(registry, daemon, python_layout):
    reg = registry()
    reg.push(python_layout)
    d = daemon()
    mdg, man = layout_manifest(python_layout)

    res, err, prog, t1 = pull(d.home, reg.image)
    assert err is None, err
    assert res["ref"] == reg.image and res["digest"] == mdg, res
    assert res["registry"] == reg.host
    assert any(p["phase"] == "pull" for p in prog)
    refs, blobs, tmp = d.store()
    assert refs == {reg.image: mdg}
    want = {mdg[7:], man["config"]["digest"][7:]} | {l["digest"][7:] for l in man["layers"]}
    assert want <= set(blobs), (want, blobs)
    assert tmp == []

    # Cached: the manifest is fetched again (tags move), no blob is. Counted on the wire:
    # the same pull through a counting pass-through (another name for the same registry,
    # so the store already holds every blob).
    proxy = CountingProxy(reg.host)
    try:
        via = "%s/library/python:%s" % (proxy.host, TAG)
        res2, err, _, t2 = pull(d.home, via)
        assert err is None and res2["digest"] == mdg, err
        assert proxy.manifest_gets >= 1, "the cached pull did not ask for the manifest"
        assert sum(proxy.blob_gets.values()) == 0, proxy.blob_gets
    finally:
        proxy.stop()
    print("pull %.2fs, cached pull %.2fs" % (t1, t2))
    refs, blobs2, _ = d.store()
    assert blobs2 == blobs

    # By digest: a new name, no new blob.
    byd = "%s/library/python@%s" % (reg.host, mdg)
    res3, err, _, _ = pull(d.home, byd)
    assert err is None, err
    assert res3 == {"ref": byd, "digest": mdg, "registry": reg.host}
    refs, blobs2, _ = d.store()
    assert refs[byd] == mdg and blobs2 == blobs

    # A digest the registry does not have is refused by name, and nothing changes.
    bad = "%s/library/python@sha256:%s" % (reg.host, "0" * 64)
    _, err, _, _ = pull(d.home, bad)
    assert err and "not found" in err["message"], err
    # An unknown tag.
    _, err, _, _ = pull(d.home, "%s/library/python:nope" % reg.host)
    assert err and "not found" in err["message"], err

    # The image is usable by the store (resolves, lists) and the pull is audited.
    lst = api(d.home, "GET", "/v1/images")
    assert any(i["ref"] == reg.image and i["digest"] == mdg for i in lst), lst
    with open(os.path.join(d.home, "audit.log")) as f:
        recs = [json.loads(x) for x in f if x.strip()]
    pulls = [r for r in recs if r["action"] == "image.pull"]
    assert pulls and pulls[0]["details"] == {"ref": reg.image, "digest": mdg,
                                             "registry": reg.host}


class CountingProxy:
    """A plain pass-through in front of the registry that counts the blob downloads per
    digest, can hold each blob back `delay` seconds (a slow link), and records the most
    blob downloads it saw at once."""

    def __init__(self, upstream, delay=0.0, gate_manifests=0, gate_event=None):
        """gate_manifests=N: hold every blob download until N manifest requests have
        arrived; gate_event: hold them until the event is set (then 0.5 s more, for the
        daemon to take in what was sent). Either way pulls are shown to overlap:
        self.gate_opened says the gate opened on its condition, not on its 60 s timeout."""
        import collections
        import http.server
        import threading
        self.upstream = upstream
        self.delay = delay
        self.blob_gets = collections.Counter()
        self.manifest_gets = 0
        self.gate_manifests = gate_manifests
        self.gate_event = gate_event
        self.gate_opened = None
        self.active = 0
        self.max_active = 0
        lock = threading.Lock()
        cond = threading.Condition(lock)
        proxy = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                blob = "/blobs/" in self.path
                if "/manifests/" in self.path:
                    with cond:
                        proxy.manifest_gets += 1
                        cond.notify_all()
                if blob and proxy.gate_manifests:
                    with cond:
                        ok = cond.wait_for(lambda: proxy.manifest_gets >= proxy.gate_manifests,
                                           60)
                        if proxy.gate_opened is None or not ok:
                            proxy.gate_opened = ok
                if blob and proxy.gate_event is not None:
                    ok = proxy.gate_event.wait(60)
                    if ok:
                        time.sleep(0.5)
                    with lock:
                        if proxy.gate_opened is None or not ok:
                            proxy.gate_opened = ok
                if blob:
                    with lock:
                        proxy.blob_gets[self.path.rsplit("/", 1)[1]] += 1
                        proxy.active += 1
                        proxy.max_active = max(proxy.max_active, proxy.active)
                try:
                    hdrs = {k: self.headers[k] for k in ("Accept", "Range", "Authorization")
                            if self.headers.get(k)}
                    c = http.client.HTTPConnection(proxy.upstream, timeout=60)
                    c.request("GET", self.path, headers=hdrs)
                    r = c.getresponse()
                    body = r.read()
                    c.close()
                    if blob and proxy.delay:
                        time.sleep(proxy.delay)
                    self.send_response(r.status)
                    for k in ("Content-Type", "Docker-Content-Digest", "Content-Range",
                              "WWW-Authenticate", "Location"):
                        if r.getheader(k):
                            self.send_header(k, r.getheader(k))
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                finally:
                    if blob:
                        with lock:
                            proxy.active -= 1

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.host = "127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def check_blobs(d):
    """Every stored blob matches its name."""
    import hashlib
    _, blobs, _ = d.store()
    for b in blobs:
        h = hashlib.sha256()
        with open(os.path.join(d.home, "images", "blobs", "sha256", b), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        assert h.hexdigest() == b
    return blobs


def pull_all(d, images, sent=None):
    """Pull `images` at once, one thread each; `sent` (a threading.Event), when given, is
    set once every request has been written to the daemon."""
    import threading
    out = [None] * len(images)
    left = [len(images)]
    lock = threading.Lock()

    def go(i):
        t0 = time.monotonic()
        c = UnixConn(os.path.join(d.home, "kosa8d.sock"), 600)
        try:
            c.request("POST", "/v1/images/pull", body=json.dumps({"image": images[i]}),
                      headers={"Content-Type": "application/json"})
            with lock:
                left[0] -= 1
                if not left[0] and sent is not None:
                    sent.set()
            data = c.getresponse().read().decode()
        finally:
            c.close()
        lines = [json.loads(x) for x in data.splitlines() if x.strip()]
        last = lines[-1] if lines else {}
        out[i] = (last.get("result"), last.get("error"),
                  [x["progress"] for x in lines if "progress" in x], time.monotonic() - t0)
    ts = [threading.Thread(target=go, args=(i,)) for i in range(len(images))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def test_concurrent_pulls_do_not_corrupt_the_store(registry, daemon, python_layout):
    reg = registry()
    reg.push(python_layout)
    mdg, man = layout_manifest(python_layout)
    want = {man["config"]["digest"]} | {l["digest"] for l in man["layers"]}
    # A slow link, and no blob leaves before both pulls were sent to the daemon: the pulls
    # are shown to overlap (gate_opened), not assumed to. (Pulls of one name share one
    # flight: the second waits for the first and asks the registry for nothing.)
    import threading
    sent = threading.Event()
    proxy = CountingProxy(reg.host, delay=0.3, gate_event=sent)
    try:
        d = daemon()
        image = "%s/library/python:%s" % (proxy.host, TAG)
        for res, err, _, _ in pull_all(d, [image, image], sent):
            assert err is None, err
            assert res["digest"] == mdg
        assert proxy.gate_opened is True, "the two pulls did not overlap"
        refs, blobs, tmp = d.store()
        assert refs == {image: mdg} and tmp == []
        check_blobs(d)
        # The work was done once: every blob crossed the wire once.
        assert set(proxy.blob_gets) == want, proxy.blob_gets
        assert all(n == 1 for n in proxy.blob_gets.values()), proxy.blob_gets

        # Two names of one image at once (two pulls, not one): still each blob once.
        push_tag(reg, python_layout, "other", src_tag=TAG)
        proxy.blob_gets.clear()
        # Two names: two flights, each asks for its manifest; no blob leaves before both did.
        proxy.manifest_gets, proxy.gate_opened = 0, None
        proxy.gate_event, proxy.gate_manifests = None, 2
        d2 = daemon()
        imgs = [image, "%s/library/python:other" % proxy.host]
        for res, err, _, _ in pull_all(d2, imgs):
            assert err is None, err
            assert res["digest"] == mdg
        assert proxy.gate_opened is True, "the two pulls did not overlap"
        refs, _, tmp = d2.store()
        assert refs == {imgs[0]: mdg, imgs[1]: mdg} and tmp == []
        check_blobs(d2)
        assert set(proxy.blob_gets) == want, proxy.blob_gets
        assert all(n == 1 for n in proxy.blob_gets.values()), proxy.blob_gets
    finally:
        proxy.stop()


def layered_layout(dst, nlayers=3, layer_bytes=2 << 20):
    """An OCI layout (tag "layers") of an image of `nlayers` gzip'd tar layers, each with
    one file of `layer_bytes` random bytes, written by hand."""
    import gzip
    import hashlib
    import io
    import tarfile
    blobs = os.path.join(dst, "blobs", "sha256")
    os.makedirs(blobs)

    def put(data):
        dg = hashlib.sha256(data).hexdigest()
        with open(os.path.join(blobs, dg), "wb") as f:
            f.write(data)
        return "sha256:" + dg

    layers, diff_ids = [], []
    for i in range(nlayers):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
            d = tarfile.TarInfo("layer%d" % i)
            d.type = tarfile.DIRTYPE
            d.mode = 0o755
            t.addfile(d)
            data = os.urandom(layer_bytes)
            f = tarfile.TarInfo("layer%d/data" % i)
            f.size = len(data)
            f.mode = 0o644
            t.addfile(f, io.BytesIO(data))
        diff_ids.append("sha256:" + hashlib.sha256(raw.getvalue()).hexdigest())
        gz = gzip.compress(raw.getvalue(), mtime=0)
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                       "digest": put(gz), "size": len(gz)})
    cfg = json.dumps({"architecture": "amd64", "os": "linux",
                      "config": {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]},
                      "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    man = json.dumps({"schemaVersion": 2,
                      "mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                 "digest": put(cfg), "size": len(cfg)},
                      "layers": layers}).encode()
    mdg = put(man)
    with open(os.path.join(dst, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(dst, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": mdg,
            "size": len(man), "annotations": {"org.opencontainers.image.ref.name": "layers"}}]},
            f)
    return mdg, json.loads(man)


def push_layered(reg):
    """Push the 3-layer image of layered_layout() to reg as library/python:layers."""
    tmp = new_home("k8lay-")
    try:
        mdg, man = layered_layout(os.path.join(tmp, "l"))
        push_tag(reg, os.path.join(tmp, "l"), "layers", src_tag="layers", all_=False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return mdg, man


def test_several_layers_download_in_parallel(registry, daemon):
    reg = registry()
    mdg, man = push_layered(reg)
    assert len(man["layers"]) == 3
    proxy = CountingProxy(reg.host, delay=0.5)
    try:
        d = daemon()
        image = "%s/library/python:layers" % proxy.host
        res, err, prog, dt = pull(d.home, image)
        assert err is None, err
        assert res["digest"] == mdg
        refs, blobs, tmp = d.store()
        assert refs == {image: mdg} and tmp == []
        want = {man["config"]["digest"]} | {l["digest"] for l in man["layers"]}
        assert {b for b in blobs} >= {w[7:] for w in want} | {mdg[7:]}
        check_blobs(d)
        assert set(proxy.blob_gets) == want and all(n == 1 for n in proxy.blob_gets.values())
        print("3-layer pull through a 0.5 s/blob link: %.2fs, %d blobs at once at most"
              % (dt, proxy.max_active))
        # Config and layers overlapped, at most 3 at a time: with 0.5 s per blob, four
        # blobs one after the other would take 2 s.
        assert 2 <= proxy.max_active <= 3, proxy.max_active
        # Every layer reported progress, whole.
        for l in man["layers"]:
            assert any(p["what"] == "layer " + l["digest"][:19] and p["done"] == l["size"]
                       for p in prog), prog
        # The image is usable: it resolves and lists.
        lst = api(d.home, "GET", "/v1/images")
        assert any(i["ref"] == image and i["digest"] == mdg for i in lst), lst
    finally:
        proxy.stop()


def test_a_missing_layer_fails_the_pull_by_name(registry, daemon):
    """One of three layers is gone from the registry: the pull fails naming it, the other
    downloads stop, and the store is left as it was."""
    reg = registry()
    mdg, man = push_layered(reg)
    gone = man["layers"][1]["digest"][7:]
    shutil.rmtree(os.path.join(reg.root, "docker", "registry", "v2", "blobs", "sha256",
                               gone[:2], gone))
    proxy = CountingProxy(reg.host, delay=0.3)
    try:
        d = daemon()
        _, err, _, _ = pull(d.home, "%s/library/python:layers" % proxy.host)
        assert err and "layer sha256:%s" % gone[:12] in err["message"], err
        assert "not found" in err["message"] and "cancelled" not in err["message"], err
        refs, blobs, tmp = d.store()
        assert refs == {} and blobs == [] and tmp == [], (refs, blobs, tmp)
    finally:
        proxy.stop()


def bcrypt_htpasswd(user, password):
    """An htpasswd line with a bcrypt hash (the only kind docker-registry accepts)."""
    if shutil.which("htpasswd"):
        p = subprocess.run(["htpasswd", "-nbB", user, password], capture_output=True, text=True)
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip() + "\n", None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import crypt
        h = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))
        if h and h.startswith("$2"):
            return "%s:%s\n" % (user, h), None
    except (ImportError, AttributeError, OSError):
        pass
    return None, "no bcrypt: neither htpasswd -B (apache2-utils) nor a crypt with blowfish"


def test_basic_auth_registry(registry, daemon, python_layout):
    line, why = bcrypt_htpasswd("kuser", "k-secret")
    if not line:
        print("skipping: " + why)
        pytest.skip(why)
    reg = registry(htpasswd=line)
    reg.push(python_layout, creds="kuser:k-secret")
    d = daemon()

    _, err, _, _ = pull(d.home, reg.image)
    assert err and "password" in err["message"] and err["errno"] == 13, err
    assert d.store()[0] == {}

    import base64
    with open(os.path.join(d.home, "auth.json"), "w") as f:
        json.dump({"auths": {reg.host: {"auth": base64.b64encode(b"kuser:wrong").decode()}}}, f)
    _, err, _, _ = pull(d.home, reg.image)
    assert err and "refused the credentials" in err["message"], err

    # kosa8 login stores them through the daemon, readable by its user only
    from conftest import run as cli
    p = cli(["login", reg.host, "-u", "kuser", "--password-stdin"], d.home, input="k-secret\n")
    assert p.returncode == 0, p.stderr
    st = os.stat(os.path.join(d.home, "auth.json"))
    assert st.st_mode & 0o777 == 0o600
    assert "k-secret" not in open(os.path.join(d.home, "audit.log")).read()
    res, err, _, _ = pull(d.home, reg.image)
    assert err is None, err
    mdg, _ = layout_manifest(python_layout)
    assert res["digest"] == mdg


def test_corrupt_blob_is_refused_and_nothing_stored(registry, daemon, python_layout):
    reg = registry()
    reg.push(python_layout)
    _, man = layout_manifest(python_layout)
    layer = max(man["layers"], key=lambda l: l["size"])["digest"][7:]
    data = os.path.join(reg.root, "docker", "registry", "v2", "blobs", "sha256", layer[:2], layer,
                        "data")
    assert os.path.exists(data)
    with open(data, "r+b") as f:       # same size, one byte flipped in the middle
        f.seek(os.path.getsize(data) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xff]))
    d = daemon()
    _, err, _, _ = pull(d.home, reg.image)
    assert err, "a corrupt layer was accepted"
    assert "corrupt" in err["message"] and layer in err["message"], err
    refs, blobs, tmp = d.store()
    assert refs == {} and blobs == [] and tmp == [], (refs, blobs, tmp)


def test_offline_fails_fast_and_uses_the_store(daemon, python_layout):
    port = free_port()      # nothing listens there
    image = "127.0.0.1:%d/library/python:%s" % (port, TAG)
    d = daemon(env_extra={"KOSA8_OFFLINE": "1"})
    _, err, _, dt = pull(d.home, image)
    assert err and ("KOSA8_OFFLINE is set: not fetching %s; load it with kosa8 image load" % image
            in err["message"]), err
    assert dt < 2, dt
    # Loaded under that name, the same pull succeeds without any network.
    lines = api(d.home, "POST", "/v1/images/load", {"path": python_layout, "tag": image})
    assert "result" in lines[-1], lines[-1]
    res, err, _, dt = pull(d.home, image)
    assert err is None, err
    mdg, _ = layout_manifest(python_layout)
    assert res["digest"] == mdg and dt < 2


class FlakyBearerProxy:
    """A registry front in the manner of Docker Hub: Bearer tokens from a realm, blobs
    redirected to another host ("localhost" instead of "127.0.0.1"), and faults: the first
    manifest request gets a 503, the first download of the biggest layer is cut in half
    (the client must resume with a Range request)."""

    def __init__(self, upstream, cut_digest, pad_digest=None):
        import http.server
        import threading
        self.upstream = upstream
        self.cut = cut_digest
        self.pad = pad_digest
        self.events = []
        proxy = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def send(self, code, body=b"", headers=()):
                self.send_response(code)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                p = self.path
                if p.startswith("/token"):
                    proxy.events.append(("token", p))
                    return self.send(200, json.dumps({"token": "tok-123"}).encode(),
                                     [("Content-Type", "application/json")])
                if p.startswith("/_blob/"):
                    return self.blob(p[len("/_blob/"):])
                if self.headers.get("Authorization") != "Bearer tok-123":
                    proxy.events.append(("401", p))
                    ch = ('Bearer realm="http://127.0.0.1:%d/token",service="kosa8-test",'
                          'scope="repository:library/python:pull"' % proxy.port)
                    return self.send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}',
                                     [("WWW-Authenticate", ch)])
                if "/manifests/" in p:
                    if not any(e[0] == "503" for e in proxy.events):
                        proxy.events.append(("503", p))
                        return self.send(503, b"try again")
                    c = http.client.HTTPConnection(proxy.upstream, timeout=30)
                    c.request("GET", p, headers={"Accept": self.headers.get("Accept", "")})
                    r = c.getresponse()
                    body = r.read()
                    c.close()
                    return self.send(r.status, body,
                                     [("Content-Type", r.getheader("Content-Type", ""))])
                if "/blobs/" in p:
                    dg = p.rsplit("/", 1)[1]
                    proxy.events.append(("redirect", dg))
                    return self.send(307, b"", [("Location", "http://localhost:%d/_blob/%s"
                                                 % (proxy.port, p[len("/v2/"):]))])
                return self.send(404, b"")

            def blob(self, path):
                rng = self.headers.get("Range")
                proxy.events.append(("blob", path, rng, self.headers.get("Authorization")))
                c = http.client.HTTPConnection(proxy.upstream, timeout=30)
                c.request("GET", "/v2/" + path, headers={"Range": rng} if rng else {})
                r = c.getresponse()
                body = r.read()
                c.close()
                if proxy.pad and path.endswith(proxy.pad):
                    body += b"\0" * (1 << 20)      # more than the manifest declares
                hdrs = [("Content-Type", "application/octet-stream")]
                if r.getheader("Content-Range"):
                    hdrs.append(("Content-Range", r.getheader("Content-Range")))
                if path.endswith(proxy.cut) and not rng and not any(
                        e[0] == "cut" for e in proxy.events):
                    proxy.events.append(("cut", path))
                    self.send_response(r.status)
                    for k, v in hdrs:
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[:len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                return self.send(r.status, body, hdrs)

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass        # the client hanging up on a cut or padded blob is the point

        self.server = Server(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_bearer_redirect_retry_and_resume(registry, daemon, python_layout):
    reg = registry()
    reg.push(python_layout)
    mdg, man = layout_manifest(python_layout)
    big = max(man["layers"], key=lambda l: l["size"])["digest"]
    proxy = FlakyBearerProxy(reg.host, big)
    try:
        d = daemon()
        image = "127.0.0.1:%d/library/python:%s" % (proxy.port, TAG)
        res, err, prog, _ = pull(d.home, image)
        assert err is None, (err, proxy.events)
        assert res["digest"] == mdg
        kinds = [e[0] for e in proxy.events]
        assert "401" in kinds and "token" in kinds and "503" in kinds, proxy.events
        tok = [e[1] for e in proxy.events if e[0] == "token"][0]
        assert "scope=repository%3Alibrary%2Fpython%3Apull" in tok and "service=kosa8-test" in tok
        assert "cut" in kinds, proxy.events
        ranged = [e for e in proxy.events if e[0] == "blob" and e[2]]
        assert any(p["what"].startswith("layer") for p in prog), prog
        assert ranged and ranged[0][1].endswith(big) and ranged[0][2].startswith("bytes="), \
            proxy.events
        # The token is not sent to the other host the blobs are redirected to.
        assert all(e[3] is None for e in proxy.events if e[0] == "blob"), proxy.events
        refs, blobs, tmp = d.store()
        assert refs == {image: mdg} and big[7:] in blobs and tmp == []
    finally:
        proxy.stop()


def index_layout(src, dst, platforms):
    """A copy of the layout whose one tag, "multi", is an OCI image index listing the
    image's manifest once per platform in `platforms` ("os/arch[/variant]")."""
    import hashlib
    shutil.copytree(src, dst, copy_function=os.link)
    mdg, _ = layout_manifest(src)
    msize = os.path.getsize(os.path.join(src, "blobs", "sha256", mdg[7:]))
    ms = []
    for p in platforms:
        parts = p.split("/")
        plat = {"os": parts[0], "architecture": parts[1]}
        if len(parts) > 2:
            plat["variant"] = parts[2]
        ms.append({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": mdg,
                   "size": msize, "platform": plat})
    idx = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                      "manifests": ms}).encode()
    idg = hashlib.sha256(idx).hexdigest()
    with open(os.path.join(dst, "blobs", "sha256", idg), "wb") as f:
        f.write(idx)
    os.unlink(os.path.join(dst, "index.json"))
    with open(os.path.join(dst, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json", "digest": "sha256:" + idg,
            "size": len(idx), "annotations": {"org.opencontainers.image.ref.name": "multi"}}]}, f)
    return "sha256:" + idg


def push_tag(reg, layout, tag, src_tag="multi", all_=True):
    p = subprocess.run(["skopeo", "copy"] + (["--all"] if all_ else []) +
                       ["--dest-tls-verify=false", "oci:%s:%s" % (layout, src_tag),
                        "docker://%s/library/python:%s" % (reg.host, tag)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


def test_image_index_picks_linux_amd64(registry, daemon, python_layout):
    reg = registry()
    tmp = new_home("k8idx-")
    try:
        idg = index_layout(python_layout, os.path.join(tmp, "ok"),
                           ["linux/arm64/v8", "linux/amd64"])
        push_tag(reg, os.path.join(tmp, "ok"), "multi")
        index_layout(python_layout, os.path.join(tmp, "no"), ["linux/arm64/v8", "linux/s390x"])
        push_tag(reg, os.path.join(tmp, "no"), "noamd")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mdg, _ = layout_manifest(python_layout)
    d = daemon()
    res, err, _, _ = pull(d.home, "%s/library/python:multi" % reg.host)
    assert err is None, err
    assert res["digest"] == mdg      # the platform's manifest, not the index
    # By the index's digest too.
    res, err, _, _ = pull(d.home, "%s/library/python@%s" % (reg.host, idg))
    assert err is None and res["digest"] == mdg, err
    _, err, _, _ = pull(d.home, "%s/library/python:noamd" % reg.host)
    assert err and "no linux/amd64 image" in err["message"], err
    assert "linux/arm64/v8, linux/s390x" in err["message"], err


def test_docker_io_goes_to_the_mirror(registry, daemon, python_layout):
    reg = registry()
    reg.push(python_layout)
    # Only the mirror is contacted when it has the image (no traffic leaves 127.0.0.1).
    d = daemon(env_extra={"KOSA8_REGISTRY_MIRRORS": "http://" + reg.host})
    res, err, _, _ = pull(d.home, "python:" + TAG)
    assert err is None, err
    mdg, _ = layout_manifest(python_layout)
    assert res == {"ref": "docker.io/library/python:" + TAG, "digest": mdg,
                   "registry": reg.host}


def test_sandbox_pull_fetches_a_missing_image(home, sandbox, registry, python_layout):
    """sb_pull pulls what the store lacks; the shared store already has the blobs (the
    session loaded the same image), so only the manifest travels."""
    reg = registry()
    reg.push(python_layout)
    mdg, _ = layout_manifest(python_layout)
    lines = api(home.path, "POST", "/v1/sandboxes/%s/pull" % sandbox, {"image": reg.image})
    assert "result" in lines[-1], lines[-1]
    assert lines[-1]["result"]["digest"] == mdg
    p = home("sandbox", "run", sandbox, reg.image, "python3", "-c", "print('pulled')")
    assert p.stdout == "pulled\n", p.stderr
    recs = home.json("audit", "ls")
    assert any(r["action"] == "image.pull" and r["details"]["ref"] == reg.image for r in recs)


def test_blob_larger_than_declared_is_cut_off(registry, daemon, python_layout):
    reg = registry()
    reg.push(python_layout)
    _, man = layout_manifest(python_layout)
    big = max(man["layers"], key=lambda l: l["size"])["digest"]
    proxy = FlakyBearerProxy(reg.host, "-", pad_digest=big)
    try:
        d = daemon()
        _, err, _, _ = pull(d.home, "127.0.0.1:%d/library/python:%s" % (proxy.port, TAG))
        assert err and "larger than its descriptor says" in err["message"], err
        refs, blobs, tmp = d.store()
        assert refs == {} and blobs == [] and tmp == [], (refs, blobs, tmp)
    finally:
        proxy.stop()


def test_mirror_from_the_config_file(registry, daemon, python_layout):
    reg = registry()
    reg.push(python_layout)
    d = daemon()
    # $KOSA8_HOME/config.json is read at each pull: no restart needed
    with open(os.path.join(d.home, "config.json"), "w") as f:
        json.dump({"registry_mirrors": ["http://" + reg.host]}, f)
    res, err, _, _ = pull(d.home, "python:" + TAG)
    assert err is None, err
    assert res["registry"] == reg.host and res["ref"] == "docker.io/library/python:" + TAG


def test_daemon_offline_flag(python_layout):
    from conftest import run as cli
    h = new_home("k8o-")
    try:
        cli(["daemon", "start", "--accel", "tcg", "--offline"], h, check=True, timeout=120)
        assert cli(["daemon", "status", "--json"], h, check=True).stdout.count('"offline": true')
        t0 = time.monotonic()
        p = cli(["image", "pull", "127.0.0.1:%d/library/python:%s" % (free_port(), TAG)], h)
        assert p.returncode != 0 and "not fetching" in p.stderr, p.stderr
        assert time.monotonic() - t0 < 5
        # local images keep working
        cli(["image", "load", python_layout, "--tag", "python:3.12-slim"], h, check=True)
    finally:
        cli(["daemon", "stop"], h)
        shutil.rmtree(h, ignore_errors=True)
