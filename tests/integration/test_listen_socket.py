"""The listening socket `superfluid serve` hands uvicorn: its connections send small writes at once.

uvicorn serves a given socket through `loop.create_server(sock=...)`, and asyncio turns Nagle's
algorithm off on each accepted connection only when the socket names IPPROTO_TCP. With Nagle on,
a reply's first body bytes written after its headers wait for the client's delayed ACK (40 ms on
Linux) on a kept-alive connection, so every streamed first token reached clients late.
"""

import asyncio
import socket

import pytest

from superfluid.entrypoints.server import listen


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


async def _accepted_nodelay(sock: socket.socket) -> int:
    """TCP_NODELAY on the server side of one connection accepted the way uvicorn accepts it."""
    loop = asyncio.get_running_loop()
    seen: asyncio.Future[int] = loop.create_future()

    class Record(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            conn = transport.get_extra_info("socket")
            seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await loop.create_server(Record, sock=sock)
    host, port = sock.getsockname()[:2]
    try:
        _, writer = await asyncio.open_connection(host, port)
        try:
            return await asyncio.wait_for(seen, timeout=10)
        finally:
            writer.close()
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        pytest.param(
            "::1",
            marks=pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here"),
        ),
    ],
)
def test_accepted_connections_have_nagle_off(host):
    sock = listen(host, 0)
    assert asyncio.run(_accepted_nodelay(sock)) != 0
