# SPDX-License-Identifier: Apache-2.0
"""kosa8: Python's way to kosa8d (standard library only). A sandbox is a small virtual
machine for code nobody trusts; this package drives kosa8d's API (docs/api.yaml) over its
unix socket.

    import kosa8
    with kosa8.Sandbox.create("demo", image="python:3.12-slim") as sb:
        print(sb.run(["python3", "-c", "print(6*7)"]).stdout)        # b'42\\n'
        sb.run_cell("x = 6 * 7")
        print(sb.run_cell("x").text)                                  # 42
"""
from .errors import (BadRequest, Conflict, DaemonNotRunning, InternalError, Kosa8Error,
                     MethodNotAllowed, NotFound, ProcessError, ProtocolError, Unavailable)
from .sandbox import Client, Container, Context, Execution, Result, Sandbox

__version__ = "0.1.0"
__all__ = ["Client", "Sandbox", "Container", "Context", "Execution", "Result", "Kosa8Error",
           "BadRequest", "NotFound", "MethodNotAllowed", "Conflict", "Unavailable",
           "InternalError", "DaemonNotRunning", "ProtocolError", "ProcessError"]
