"""The one exception type of the client: the daemon's error, carried back.

The agent answers a failed request with HTTP 4xx/5xx and the body
``{"error": {"code": "ERR_...", "message": "...", "details"?: ...}}``
(codes and statuses in ``agent/errors.ts``). :class:`AgentError` keeps that
code and message unchanged, so a Python worker logs exactly what ``agentd``
raised. Errors found before a request is sent (a key that does not parse) use
the same codes with ``status`` ``None``.
"""
from typing import Any, Optional, Tuple


class AgentError(Exception):
    """An error with a stable code (``ERR_KEY_INVALID``, ``ERR_SOURCE_NOT_FOUND``, ...).

    Attributes:
        code: the daemon's stable error code; branch on this, not on the message.
        message: the human-readable reason, as the daemon wrote it.
        status: the HTTP status of the answer, or ``None`` when the error was
            raised in this process (no request made, or no agent reached).
        details: optional structured detail from the daemon (``error.details``).
    """

    def __init__(self, code: str, message: str, status: Optional[int] = None, details: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.details = details

    def __reduce__(self) -> Tuple[Any, Tuple[str, str, Optional[int], Any]]:
        # Pickles with every field, so the error survives multiprocessing (a worker pool re-raising it).
        return (AgentError, (self.code, self.message, self.status, self.details))

    def __repr__(self) -> str:
        return f"AgentError(code={self.code!r}, message={self.message!r}, status={self.status!r})"
