"""HTTP/1.1 + JSON over the agent's unix socket, with the standard library only.

Every request opens its own connection (a unix-socket connect costs
microseconds, far less than any copy the agent makes), so one
:class:`UnixSocketTransport` is safe to share between threads and never sends
a request on a connection the agent has already closed.
"""
import http.client
import json
import socket
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Tuple

from .errors import AgentError

#: Where a system agent listens (``agent/client/client.ts`` uses the same default).
DEFAULT_SOCKET_PATH = "/run/agentd/agentd.sock"
#: "Use the transport's timeout" (``None`` already means "no timeout").
_DEFAULT: Any = object()


class UnixHTTPConnection(http.client.HTTPConnection):
    """An ``http.client`` connection whose transport is a unix stream socket at ``socket_path``."""

    def __init__(self, socket_path: str, timeout: Optional[float] = None) -> None:
        # The host only fills the Host header; the socket path decides where the bytes go.
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class UnixSocketTransport:
    """Sends one JSON request and returns the parsed JSON answer.

    ``timeout_s`` bounds each blocking socket operation (connect, each read),
    not the whole request; ``None`` waits forever. The agent answers offload
    and onload only after every copy is done, so keep it above the time your
    largest batch takes.
    """

    def __init__(self, socket_path: str = DEFAULT_SOCKET_PATH, timeout_s: Optional[float] = 300.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: Any = None, *, timeout_s: Any = _DEFAULT) -> Any:
        """``method path`` with ``body`` as JSON (none when ``None``); the parsed 2xx answer.

        ``timeout_s`` overrides the transport's bound for this request
        (``None``: wait as long as the agent takes, e.g. for a lock grant).
        Raises AgentError, one of three kinds:

        * the agent refused the request: the daemon's code, message and HTTP
          status (a body over the route's limit: ``ERR_BODY_TOO_LARGE``, 413);
        * no agent to talk to: ``ERR_AGENT_UNREACHABLE`` (status None) when
          nothing accepts a connection at the socket (no socket, a stale one,
          no permission), or the agent does not answer in time;
        * ``ERR_CONNECTION_LOST`` (status None) when the agent accepted the
          connection but closed it before answering: it stopped or crashed,
          or refused the connection over api.maxConnections; the request may
          or may not have been carried out.

        ``ERR_INTERNAL`` for an answer that is not the JSON the API promises.
        """
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode("utf-8")
        headers = {"accept": "application/json"}
        if payload is not None:
            headers["content-type"] = "application/json"
        conn = self._connected(method, path, timeout_s)
        try:
            with self._translated(method, path, conn.timeout):
                try:
                    conn.request(method, path, body=payload, headers=headers)
                except (BrokenPipeError, ConnectionResetError):
                    # The agent may have answered before reading the whole body and closed its end;
                    # the answer is then waiting to be read (if not, getresponse fails as a lost connection).
                    pass
                response = conn.getresponse()
                raw = response.read()
        finally:
            conn.close()
        return _parse_answer(raw, response.status, self.socket_path)

    def events(self, path: str, body: Any = None) -> Iterator[Tuple[str, Any]]:
        """``GET path`` (``POST`` with ``body`` as JSON) as a server-sent event stream: yields ``(event type, parsed JSON data)``.

        Blocks between events (the agent sends a keep-alive comment every
        15 s, so ``timeout_s`` above that notices a hung agent). Ends when the
        agent closes the stream; closing the generator closes the connection.
        An error answer raises AgentError like :meth:`request`.
        """
        method = "GET" if body is None else "POST"
        conn = self._connected(method, path, _DEFAULT)
        try:
            with self._translated(method, path, conn.timeout):
                headers = {"accept": "text/event-stream"}
                payload = None
                if body is not None:
                    payload = json.dumps(body).encode("utf-8")
                    headers["content-type"] = "application/json"
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                if response.status != 200:
                    _parse_answer(response.read(), response.status, self.socket_path)
                    raise AgentError("ERR_INTERNAL", f"agent answered {response.status} to an event stream request", response.status)
                event, data = "", []
                for line in iter(response.readline, b""):
                    text = line.decode("utf-8").rstrip("\r\n")
                    if text == "":  # a blank line ends an event
                        if event and data:
                            yield event, json.loads("\n".join(data))
                        event, data = "", []
                    elif text.startswith("event:"):
                        event = text[6:].strip()
                    elif text.startswith("data:"):
                        data.append(text[5:].lstrip())
                    # "id:" lines and ": keepalive" comments carry nothing a client needs
        finally:
            conn.close()

    def _connected(self, method: str, path: str, timeout_s: Any) -> UnixHTTPConnection:
        """A connection to the agent; AgentError ERR_AGENT_UNREACHABLE when none can be made."""
        conn = UnixHTTPConnection(self.socket_path, timeout=self.timeout_s if timeout_s is _DEFAULT else timeout_s)
        with self._translated(method, path, conn.timeout, connected=False):
            conn.connect()
        return conn

    @contextmanager
    def _translated(self, method: str, path: str, timeout_s: Optional[float], connected: bool = True) -> Iterator[None]:
        """Socket and protocol failures become AgentError: ERR_AGENT_UNREACHABLE before
        the connection is made or on a timeout, ERR_CONNECTION_LOST after it was made."""
        try:
            yield
        except socket.timeout as err:
            raise AgentError("ERR_AGENT_UNREACHABLE",
                             f"agent at {self.socket_path} did not answer {method} {path} within {timeout_s} s") from err
        except (OSError, http.client.HTTPException) as err:
            if not connected:
                raise _unreachable(self.socket_path, err) from err
            raise AgentError("ERR_CONNECTION_LOST",
                             f"the agent at {self.socket_path} closed the connection before answering {method} {path} "
                             f"({_reason(err)}): it stopped, or refused the connection over api.maxConnections; "
                             "the request may or may not have been carried out") from err


def _parse_answer(raw: bytes, status: int, socket_path: str) -> Any:
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError as err:
        raise AgentError("ERR_INTERNAL", f"agent at {socket_path} answered {status} with a body that is not JSON", status) from err
    if 200 <= status < 300:
        return parsed
    raise _error_from_body(parsed, status)


def _error_from_body(body: Any, status: int) -> AgentError:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str) and isinstance(error.get("message"), str):
        return AgentError(error["code"], error["message"], status, error.get("details"))
    return AgentError("ERR_INTERNAL", f"agent answered HTTP {status} without an error body", status)


def _unreachable(socket_path: str, err: BaseException) -> AgentError:
    if isinstance(err, FileNotFoundError):
        why = "no socket there"
    elif isinstance(err, ConnectionRefusedError):
        why = "a stale socket, no agent listening"
    elif isinstance(err, PermissionError):
        why = "permission denied (join the socket's group, usually agentd)"
    else:
        why = _reason(err)
    return AgentError("ERR_AGENT_UNREACHABLE",
                      f"no agent answers at {socket_path}: {why}. Is agentd running? "
                      "(systemctl status agentd; or pass socket_path / set AGENTD_SOCKET)")


def _reason(err: BaseException) -> str:
    return str(err) or type(err).__name__
