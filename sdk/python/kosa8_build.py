# SPDX-License-Identifier: Apache-2.0
"""kosa8_build.py - a PEP 517 build backend of the standard library alone, so that
`pip install ./sdk/python` works with no package index and no setuptools: a wheel is a
zip of kosa8/*.py and its dist-info."""
import base64
import hashlib
import os
import zipfile

NAME = "kosa8"
VERSION = "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))
DIST = "%s-%s.dist-info" % (NAME, VERSION)
METADATA = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: Python client for "
            "kosa8d: sandboxes (small VMs) for untrusted code\nLicense: Apache-2.0\n"
            "Requires-Python: >=3.9\n" % (NAME, VERSION))
WHEEL = "Wheel-Version: 1.0\nGenerator: kosa8_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _files():
    pkg = os.path.join(HERE, NAME)
    for f in sorted(os.listdir(pkg)):
        if f.endswith(".py"):
            with open(os.path.join(pkg, f), "rb") as fh:
                yield "%s/%s" % (NAME, f), fh.read()


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d\n" % (name, digest, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    wheel = "%s-%s-py3-none-any.whl" % (NAME, VERSION)
    record = ""
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in list(_files()) + [(DIST + "/METADATA", METADATA.encode()),
                                            (DIST + "/WHEEL", WHEEL.encode())]:
            z.writestr(name, data)
            record += _record_line(name, data)
        z.writestr(DIST + "/RECORD", record + DIST + "/RECORD,,\n")
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    import tarfile
    sdist = "%s-%s.tar.gz" % (NAME, VERSION)
    with tarfile.open(os.path.join(sdist_directory, sdist), "w:gz") as t:
        for f in ("pyproject.toml", "kosa8_build.py", "README.md", NAME):
            t.add(os.path.join(HERE, f), "%s-%s/%s" % (NAME, VERSION, f))
    return sdist
