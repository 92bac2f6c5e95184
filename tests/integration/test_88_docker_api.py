# SPDX-License-Identifier: Apache-2.0
# test_88_docker_api.py - the Docker-compatible API on $KOSA8_HOME/docker.sock (issue 12,
# docs/docker.md), driven by real clients: the docker CLI on PATH and python3-docker,
# against a daemon of this module's own and Debian's docker-registry on 127.0.0.1.
import http.client
import json
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from conftest import Home, UnixHTTP, new_home
from test_50_registry import Registry

needs_registry = pytest.mark.skipif(
    not shutil.which("docker-registry") or not shutil.which("skopeo"),
    reason="docker-registry and skopeo are needed (scripts/deps.sh)")
needs_cli = pytest.mark.skipif(not shutil.which("docker"),
                               reason="a docker CLI is needed (scripts/deps.sh: docker.io)")
try:
    import docker as dockerpy
except ImportError:
    dockerpy = None
needs_py = pytest.mark.skipif(dockerpy is None,
                              reason="python3-docker is needed (scripts/deps.sh)")


@pytest.fixture(scope="module")
def dh():
    """A daemon of this module's own: (Home, the output of `kosa8 daemon start`)."""
    h = Home(new_home("k8dk-"))
    p = h.start()
    yield h, p.stdout
    h.stop()
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(h.path, ignore_errors=True)


@pytest.fixture(scope="module")
def reg(python_layout):
    if not shutil.which("docker-registry") or not shutil.which("skopeo"):
        pytest.skip("docker-registry and skopeo are needed (scripts/deps.sh)")
    r = Registry()
    r.push(python_layout)
    yield r
    r.stop()


def sock(dh):
    return os.path.join(dh[0].path, "docker.sock")


def call(dh, method, path, body=None):
    c = UnixHTTP(sock(dh), timeout=60)
    c.request(method, path, body=body)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r, data


def docker(dh, *args, timeout=300):
    cfg = tempfile.mkdtemp(prefix="k8dcfg-")
    env = dict(os.environ, DOCKER_HOST="unix://" + sock(dh), DOCKER_CONFIG=cfg)
    env.pop("DOCKER_CONTEXT", None)
    try:
        return subprocess.run(["docker"] + list(args), capture_output=True, text=True,
                              timeout=timeout, env=env)
    finally:
        shutil.rmtree(cfg, ignore_errors=True)


def audit(dh):
    with open(os.path.join(dh[0].path, "audit.log")) as f:
        return [json.loads(l) for l in f if l.strip()]


def test_socket_served_and_announced(dh):
    h, out = dh
    path = sock(dh)
    assert "docker API: unix://%s" % path in out, out
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.getuid()
    assert "docker API: unix://%s" % path in h("daemon", "status", check=True).stdout


def test_ping_version_errors_raw(dh):
    for method, path in (("HEAD", "/_ping"), ("GET", "/_ping"), ("GET", "/v1.41/_ping"),
                         ("HEAD", "/v1.47/_ping")):
        r, data = call(dh, method, path)
        assert r.status == 200, (method, path)
        assert data == (b"" if method == "HEAD" else b"OK")
        assert r.getheader("Api-Version") == "1.47"
        assert r.getheader("Ostype") == "linux"
        assert r.getheader("Docker-Experimental") == "false"
        assert "no-cache" in r.getheader("Cache-Control")
    r, data = call(dh, "GET", "/version")
    v = json.loads(data)
    assert (v["ApiVersion"], v["MinAPIVersion"], v["Os"]) == ("1.47", "1.24", "linux")
    assert v["Components"][0]["Name"] == "Engine" and v["Version"] and v["KernelVersion"]
    # Docker's error format, its status codes and wording.
    for path, status, msg in (
            ("/v1.12/version", 400, "client version 1.12 is too old"),
            ("/v1.99/version", 400, "client version 1.99 is too new"),
            ("/nonsense", 404, "page not found"),
            ("/v1.47/images/no-such:1/json", 404, "No such image: no-such:1"),
            ("/v1.47/networks", 501, "is not supported by kosa8 (see docs/docker.md)"),
            ("/v1.47/volumes", 501, "is not supported by kosa8 (see docs/docker.md)")):
        r, data = call(dh, "GET", path)
        assert r.status == status, (path, r.status, data)
        assert r.getheader("Content-Type") == "application/json"
        assert msg in json.loads(data)["message"], (path, data)
    # an exec nobody created: moby's 404 from each of its routes
    for method, path in (("GET", "/v1.47/exec/nope/json"), ("POST", "/v1.47/exec/nope/start"),
                         ("POST", "/v1.47/exec/nope/resize?h=10&w=20")):
        r, data = call(dh, method, path, body=b"{}" if method == "POST" else None)
        assert (r.status, json.loads(data)) == (404, {"message": "No such exec instance: nope"})
    try:    # a huge request line: refused or cut off, whichever the server chooses
        r, data = call(dh, "GET", "/images/json?" + "a" * 200000)
        assert r.status in (200, 400, 414), r.status
    except (ConnectionError, http.client.HTTPException):
        pass
    r, _ = call(dh, "GET", "/_ping")
    assert r.status == 200      # and the daemon keeps serving


@needs_cli
def test_docker_version_info(dh):
    p = docker(dh, "version", "--format", "{{.Server.APIVersion}} {{.Server.Os}}")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "1.47 linux"
    p = docker(dh, "info", "--format", "{{.OperatingSystem}} {{.OSType}} {{.Containers}}")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "kosa8 linux 0"
    p = docker(dh, "ps")
    assert p.returncode == 0 and p.stdout.split() == ["CONTAINER", "ID", "IMAGE", "COMMAND",
                                                      "CREATED", "STATUS", "PORTS", "NAMES"]
    p = docker(dh, "volume", "ls")
    assert p.returncode != 0
    assert "is not supported by kosa8 (see docs/docker.md)" in p.stderr, p.stderr


@needs_cli
def test_pull_images_inspect_tag_rmi(dh, reg):
    img = reg.image
    p = docker(dh, "pull", img)
    assert p.returncode == 0, p.stderr
    assert "Status: Downloaded newer image for %s" % img in p.stdout, p.stdout
    p = docker(dh, "images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split()
    assert img in lines, p.stdout
    short = lines[lines.index(img) + 1]
    p = docker(dh, "image", "inspect", img)
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)[0]
    assert info["Id"].startswith("sha256:" + short), info
    assert img in info["RepoTags"] and info["Config"]["Cmd"], info

    assert docker(dh, "tag", img, "mine/py:1").returncode == 0
    p = docker(dh, "image", "inspect", "--format", "{{.Id}}", "mine/py:1")
    assert p.stdout.strip() == info["Id"], p.stdout + p.stderr
    # By ID with two names: moby's conflict unless forced.
    p = docker(dh, "rmi", short)
    assert p.returncode != 0 and "must be forced" in p.stderr, p.stderr
    p = docker(dh, "rmi", "mine/py:1")
    assert p.returncode == 0 and "Untagged: mine/py:1" in p.stdout, p.stdout + p.stderr
    assert docker(dh, "image", "inspect", img).returncode == 0      # the other name stays
    assert docker(dh, "tag", img, "other:2").returncode == 0
    p = docker(dh, "rmi", "-f", short)
    assert p.returncode == 0 and "Deleted: " + info["Id"] in p.stdout, p.stdout + p.stderr
    p = docker(dh, "images", "-q")
    assert p.returncode == 0 and p.stdout.strip() == "", p.stdout
    with open(os.path.join(dh[0].path, "images", "refs.json")) as f:
        assert json.load(f) == {}
    acts = [(a["action"], a["details"].get("via")) for a in audit(dh)]
    assert ("image.pull", None) in acts
    assert ("image.tag", "docker") in acts and ("image.rm", "docker") in acts


@needs_cli
def test_missing_image_wording(dh, reg):
    p = docker(dh, "image", "inspect", "nope:1")
    assert p.returncode != 0
    assert "No such image: nope:1" in p.stderr, p.stderr
    p = docker(dh, "rmi", "nope:1")
    assert p.returncode != 0 and "No such image: nope:1" in p.stderr, p.stderr
    p = docker(dh, "tag", "nope:1", "x:1")
    assert p.returncode != 0 and "No such image: nope:1" in p.stderr, p.stderr
    # A pull of a tag the registry lacks: the stream's error line fails the CLI.
    p = docker(dh, "pull", "%s/library/python:no-such-tag" % reg.host)
    assert p.returncode != 0
    assert "no-such-tag" in p.stderr, p.stderr
    assert docker(dh, "version").returncode == 0


@needs_py
def test_docker_py(dh, reg):
    c = dockerpy.DockerClient(base_url="unix://" + sock(dh))
    try:
        assert c.ping() is True
        v = c.version()
        assert v["ApiVersion"] == "1.47" and v["Components"][0]["Name"] == "Engine"
        repo = "%s/library/python" % reg.host
        im = c.images.pull(repo, tag=reg.image.rsplit(":", 1)[1])
        assert im.id.startswith("sha256:")
        assert any(reg.image in i.tags for i in c.images.list())
        assert c.images.get(reg.image).id == im.id
        with pytest.raises(dockerpy.errors.ImageNotFound):
            c.images.get("nope:1")
        assert c.containers.list() == []      # served since test_89's slice
        c.images.remove(reg.image)
        assert c.images.list() == []
    finally:
        c.close()


@needs_py
@needs_registry
def test_pull_with_x_registry_auth(dh, python_layout):
    """docker-py's auth_config travels as X-Registry-Auth and is used for that pull only:
    a registry that wants a password refuses the pull without it or with a wrong one."""
    from test_50_registry import bcrypt_htpasswd
    line, why = bcrypt_htpasswd("kuser", "k-secret")
    if not line:
        pytest.skip(why)
    r = Registry(htpasswd=line)
    c = dockerpy.DockerClient(base_url="unix://" + sock(dh))
    try:
        r.push(python_layout, creds="kuser:k-secret")
        repo, tag = r.image.rsplit(":", 1)

        def pull_error(**kw):
            """The error line of the pull's progress stream (docker-py raises nothing)."""
            return " ".join(m.get("error", "") for m in
                            c.api.pull(repo, tag=tag, stream=True, decode=True, **kw))
        err = pull_error()
        assert "password" in err or "credentials" in err, err
        err = pull_error(auth_config={"username": "kuser", "password": "no"})
        assert "refused the credentials" in err, err
        im = c.images.pull(repo, tag=tag,
                           auth_config={"username": "kuser", "password": "k-secret"})
        assert im.id.startswith("sha256:")
        # filters on /images/json: reference (a glob), dangling, label
        assert [i.id for i in c.images.list(name=repo)] == [im.id]
        assert c.images.list(name="nothing-like-it") == []
        assert c.images.list(filters={"dangling": True}) == []
        assert [i.id for i in c.images.list(filters={"dangling": False})] == [im.id]
        with pytest.raises(dockerpy.errors.APIError):
            c.images.list(filters={"nonsense": "x"})
        c.images.remove(r.image)
    finally:
        c.close()
        r.stop()
    with open(os.path.join(dh[0].path, "audit.log")) as f:
        assert "k-secret" not in f.read()
    assert not os.path.exists(os.path.join(dh[0].path, "auth.json"))
