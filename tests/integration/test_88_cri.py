# SPDX-License-Identifier: Apache-2.0
# Pods through containerd's CRI plugin (what the kubelet speaks) with the kosa8 runtime
# (docs/containerd.md). Debian 12 has no crictl, so this file is a small CRI client of its
# own: Debian's python3-grpcio for HTTP/2, and the few CRI messages it needs encoded by
# hand below (runtime.v1's field numbers; the service paths are CRI's).
import os
import time

import pytest

from conftest import wait_for
from ctrkit import IMAGE, ctrd, owned  # noqa: F401 (ctrd: a fixture)

grpc = pytest.importorskip("grpc", reason="python3-grpcio is missing (scripts/deps.sh)")


# ---- protobuf, by hand: messages are lists of (field number, value) ----

def _varint(n):
    n &= (1 << 64) - 1
    out = b""
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def enc(fields):
    """[(num, value)]: int -> varint, str/bytes -> length-delimited, list -> a message,
    dict -> a map<string,string>."""
    out = b""
    for num, v in fields:
        if isinstance(v, bool) or isinstance(v, int):
            out += _varint(num << 3) + _varint(int(v))
        elif isinstance(v, dict):
            for k, val in v.items():
                e = enc([(1, k), (2, val)])
                out += _varint(num << 3 | 2) + _varint(len(e)) + e
        else:
            b = v.encode() if isinstance(v, str) else enc(v) if isinstance(v, list) else v
            out += _varint(num << 3 | 2) + _varint(len(b)) + b
    return out


def dec(b):
    """{num: [value]} (varints as int, the rest as bytes: decode nested ones again)."""
    out, i = {}, 0
    while i < len(b):
        key, i = _read_varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(b, i)
        elif wt == 2:
            n, i = _read_varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        out.setdefault(num, []).append(v)
    return out


def _read_varint(b, i):
    n, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7f) << shift
        shift += 7
        if not c & 0x80:
            return n, i


class CRI:
    def __init__(self, sock):
        self.ch = grpc.insecure_channel("unix://" + sock)

    def call(self, service, method, fields, timeout=300):
        f = self.ch.unary_unary("/runtime.v1.%s/%s" % (service, method),
                                request_serializer=lambda x: x,
                                response_deserializer=lambda x: x)
        return dec(f(enc(fields), timeout=timeout))

    def rt(self, method, fields, **kw):
        return self.call("RuntimeService", method, fields, **kw)


@pytest.fixture(scope="module")
def cri(ctrd):
    c = CRI(ctrd.sock)
    yield c
    c.ch.close()


def pod_config(name, logdir, annotations=None):
    # host network: no CNI here (and a kosa8 pod's network is its VM's anyway)
    linux = [(2, [(1, [(1, 2)])])]          # security_context.namespace_options.network=NODE
    return [(1, [(1, name), (2, name + "-uid"), (3, "default"), (4, 0)]),
            (2, name), (3, str(logdir)), (6, {"app": name}),
            (7, annotations or {}), (8, linux)]


def read_log(path):
    """The CRI log's text: lines "TIME STREAM P|F TEXT"."""
    try:
        with open(path) as f:
            return "".join(ln.split(" ", 3)[3] for ln in f if ln.count(" ") >= 3)
    except FileNotFoundError:
        return ""


def container_state(cri, cid):
    st = dec(cri.rt("ContainerStatus", [(1, cid)])[1][0])
    return st.get(3, [0])[0], st.get(7, [0])[0]     # state, exit_code


def test_cri_version_names_containerd(cri):
    v = cri.rt("Version", [(1, "v1")])
    assert v[2][0] == b"containerd" and v[4][0] == b"v1", v


def test_pod_through_cri(cri, ctrd, home, tmp_path):
    """RunPodSandbox with the kosa8 handler makes one kosa8 sandbox; CreateContainer and
    StartContainer run containers in it, their output in CRI's logs and their exit codes
    in ContainerStatus; ExecSync runs in them; StopPodSandbox and RemovePodSandbox take
    the VM away."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    cfg = pod_config("crip", logdir, {"io.kosa8.memory-mib": "640"})
    pod = cri.rt("RunPodSandbox", [(1, cfg), (2, "kosa8")])[1][0].decode()
    try:
        sb = owned(home, pod)
        assert len(sb) == 1 and sb[0]["owner"]["pod"] is True, sb
        assert sb[0]["memory_mib"] == 640          # the pod's annotation, within the node's
        # a container that prints and exits
        ccfg = [(1, [(1, "once")]), (2, [(1, IMAGE)]),
                (3, ["python3"][0]), (4, "-c"), (4, "import sys; print(6*7); sys.exit(4)"),
                (11, "once.log")]
        cid = cri.rt("CreateContainer", [(1, pod), (2, ccfg), (3, cfg)])[1][0].decode()
        cri.rt("StartContainer", [(1, cid)])
        assert wait_for(lambda: container_state(cri, cid)[0] == 2, 120), \
            container_state(cri, cid)
        assert container_state(cri, cid)[1] == 4
        assert wait_for(lambda: read_log(logdir / "once.log") == "42\n", 30), \
            read_log(logdir / "once.log")
        cri.rt("RemoveContainer", [(1, cid)])
        # a long one, and ExecSync in it
        lcfg = [(1, [(1, "long")]), (2, [(1, IMAGE)]), (3, "sleep"), (4, "1000"),
                (11, "long.log")]
        lid = cri.rt("CreateContainer", [(1, pod), (2, lcfg), (3, cfg)])[1][0].decode()
        cri.rt("StartContainer", [(1, lid)])
        assert container_state(cri, lid)[0] == 1
        r = cri.rt("ExecSync", [(1, lid), (2, "sh"), (2, "-c"),
                                (2, "echo from-exec; echo err >&2; exit 3"), (3, 60)])
        assert r[1][0] == b"from-exec\n" and r[2][0] == b"err\n" and r[3][0] == 3, r
        # both ran in the pod's one VM
        assert len(owned(home, pod)) == 1
        cri.rt("StopContainer", [(1, lid), (2, 0)])
        assert wait_for(lambda: container_state(cri, lid)[0] == 2, 60)
        cri.rt("RemoveContainer", [(1, lid)])
    finally:
        cri.rt("StopPodSandbox", [(1, pod)])
        cri.rt("RemovePodSandbox", [(1, pod)])
    assert wait_for(lambda: not owned(home, pod), 60), owned(home, pod)


def test_cri_pod_cannot_widen_the_node_policy(cri, home, tmp_path):
    cfg = pod_config("criw", tmp_path, {"io.kosa8.egress": "allow-all"})
    with pytest.raises(grpc.RpcError) as e:
        cri.rt("RunPodSandbox", [(1, cfg), (2, "kosa8")])
    assert "never widen" in e.value.details(), e.value.details()
    time.sleep(1)
    assert not [s for s in home.json("sandbox", "ls") if s.get("owner", {}).get("pod")]
