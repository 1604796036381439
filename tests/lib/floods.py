"""Connection floods for the flood tests of the scaler and webhook suites: many sockets from
several loopback source addresses (127.0.0.2 and up; Linux routes all of 127/8 to lo), each sending
an opening and then nothing (or PINGs), as a hostile client holding connection slots would."""
import socket
import ssl

# The HTTP/2 client preface, an empty SETTINGS frame and a PING frame (RFC 9113 §3.4, §6.5, §6.7).
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\0\0\0\x04\0\0\0\0\0"
H2_PING = b"\0\0\x08\x06\0\0\0\0\0" + b"\0" * 8


def client_hello(server_name: str) -> bytes:
    """The first flight of a real TLS client (its ClientHello), to send and never follow up."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def closed_by_peer(s: socket.socket) -> bool:
    """Drains what the server sent (an HTTP/2 server speaks first) and tells whether it hung up."""
    try:
        while s.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


class Flood:
    """`n` connections to 127.0.0.1:`port`, round-robin over `sources` source addresses, each
    sending `opening` once."""

    def __init__(self, port: int, n: int, sources: int, opening: bytes = b""):
        self.socks: list[socket.socket] = []
        for i in range(n):
            source = (f"127.0.0.{2 + i % sources}", 0)
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=1, source_address=source)
            except OSError:
                continue  # a full backlog: the flood is as big as it gets
            if opening:
                try:
                    s.sendall(opening)
                except OSError:
                    pass  # already closed to make room
            s.setblocking(False)
            self.socks.append(s)

    def send(self, data: bytes) -> None:
        for s in self.socks:
            try:
                s.send(data)
            except OSError:
                pass

    def open_count(self) -> int:
        return sum([not closed_by_peer(s) for s in self.socks])  # a list: drain every socket

    def close(self) -> None:
        for s in self.socks:
            s.close()
