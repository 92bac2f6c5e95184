# SPDX-License-Identifier: Apache-2.0
"""kosa8's errors: one class per answer kosa8d gives (docs/reference/api.md "Errors"), each carrying
the daemon's own message."""


class Kosa8Error(Exception):
    """Anything kosa8d refused or could not do. `code` is the API's error code
    ("not_found", ...), `status` the HTTP status, `message` the daemon's words,
    `exit_code` what the CLI would exit with for a run or exec that did not start."""

    def __init__(self, message, code="internal", status=500, exit_code=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.exit_code = exit_code


class BadRequest(Kosa8Error):
    """400: a malformed or out-of-range argument."""


class NotFound(Kosa8Error):
    """404: no such sandbox, image, container, context, checkpoint."""


class MethodNotAllowed(Kosa8Error):
    """405: the path exists, not with this method."""


class Conflict(Kosa8Error):
    """409: a name taken, a sandbox busy or in the wrong state."""


class Unavailable(Kosa8Error):
    """503: the sandbox's VM or agent is not answering."""


class InternalError(Kosa8Error):
    """500: anything else; the message says what."""


class DaemonNotRunning(Kosa8Error):
    """Nothing listens on kosa8d's socket."""


class ProtocolError(Kosa8Error):
    """kosa8d answered something this client cannot read."""


class ProcessError(Kosa8Error):
    """A process ended with a non-zero exit code (run/exec with check=True)."""

    def __init__(self, result):
        super().__init__("exit code %d: %s" % (result.exit_code, result.stderr[-500:].decode(
            "utf-8", "replace")), "process", 0, result.exit_code)
        self.result = result


_BY_CODE = {
    "bad_request": BadRequest,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "conflict": Conflict,
    "unavailable": Unavailable,
    "internal": InternalError,
}


def from_answer(status, body):
    """The exception for an error answer (its JSON body, parsed, or None)."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return ProtocolError("kosa8d answered HTTP %d without saying why" % status,
                             "internal", status)
    code = err.get("code") if isinstance(err.get("code"), str) else "internal"
    msg = err.get("message") if isinstance(err.get("message"), str) else code
    cls = _BY_CODE.get(code, InternalError)
    ec = err.get("exit_code") if isinstance(err.get("exit_code"), int) else None
    return cls(msg, code, status, ec)
