"""Refuse, and remember, every connection or name lookup that would leave this machine."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_LOCAL_NAMES = {"localhost"}


def _is_loopback(host: Any) -> bool:
    if host is None or host in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextmanager
def loopback_only() -> Iterator[list[str]]:
    """Within: connecting to, or resolving, a non-loopback host raises OSError; yields the hosts tried."""
    attempts: list[str] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def check(address: Any) -> None:
        if not isinstance(address, tuple):
            return  # an AF_UNIX path never leaves the machine
        host = address[0].decode() if isinstance(address[0], bytes) else address[0]
        if not _is_loopback(host):
            attempts.append(str(host))
            raise OSError(f"test tried to reach {host!r}; only loopback is allowed")

    def connect(self: socket.socket, address: Any) -> None:
        check(address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        check((host,))
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]
    try:
        yield attempts
    finally:
        socket.socket.connect = real_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = real_connect_ex  # type: ignore[method-assign]
        socket.getaddrinfo = real_getaddrinfo  # type: ignore[assignment]
