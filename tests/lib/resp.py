"""A minimal RESP2 client over a plain socket: real client connections to redis-server (the live
Redis suite's load and writer, the real node's replication checks), without a client library."""
from __future__ import annotations

import socket
import threading


class Conn:
    def __init__(self, port: int, timeout: float = 5.0, host: str = "127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, *args) -> None:
        out = [f"*{len(args)}\r\n".encode()]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))

    def call(self, *args):
        self.send(*args)
        return self.reply()

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by redis-server")
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self._more()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RuntimeError(f"unexpected RESP reply {line!r}")


def info(port: int, section: str, host: str = "127.0.0.1") -> dict[str, str]:
    c = Conn(port, host=host)
    try:
        text = c.call("INFO", section).decode()
    finally:
        c.close()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))


def command(port: int, *args, host: str = "127.0.0.1"):
    c = Conn(port, host=host)
    try:
        return c.call(*args)
    finally:
        c.close()


def fill(port: int, keys: int, host: str = "127.0.0.1", value_bytes: int = 100) -> None:
    """SETs `k:0` .. `k:<keys - 1>` on the master at `port`, pipelined a thousand at a time."""
    c = Conn(port, timeout=30, host=host)
    try:
        for start in range(0, keys, 1000):
            batch = range(start, min(start + 1000, keys))
            for i in batch:
                c.send("SET", f"k:{i}", "v" * value_bytes)
            for _ in batch:
                c.reply()
    finally:
        c.close()


class Writer:
    """A client that SETs 100-byte values over `k:0` .. `k:<keys - 1>` on the master at `port`,
    pipelined, about `per_second` a second, until the `with` block ends: the master's replication
    offset advances with it. A failure is raised when the block ends."""

    def __init__(self, port: int, per_second: int = 2000, host: str = "127.0.0.1", keys: int = 10000):
        self.port, self.host, self.per_second, self.keys = port, host, per_second, keys
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.written = 0
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            c = Conn(self.port, timeout=10, host=self.host)
            batch = max(1, self.per_second // 20)
            while not self.stop_event.is_set():
                for i in range(batch):
                    c.send("SET", f"k:{(self.written + i) % self.keys}", "v" * 100)
                for _ in range(batch):
                    c.reply()
                self.written += batch
                self.stop_event.wait(0.05)
            c.close()
        except BaseException as e:  # surfaced by __exit__
            self.error = e

    def __enter__(self) -> "Writer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.thread.join(10)
        if self.error and exc[0] is None:
            raise self.error
