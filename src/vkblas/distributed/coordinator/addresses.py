"""Who is asking: the client's address, believing ``X-Forwarded-For`` only from a configured reverse proxy.

Behind nginx or Caddy every request comes from the proxy's address; the proxy appends the address it saw to
``X-Forwarded-For``. Anyone can send that header, so it is read only when the direct peer is a trusted proxy, and
then from the right: the first address that is not itself a trusted proxy is the client (the entries left of it
were written by the client and prove nothing).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(entries: Sequence[str]) -> list[Network]:
    """``["127.0.0.1", "10.0.0.0/8"]`` -> networks; ValueError naming a bad entry."""
    out = []
    for e in entries:
        try:
            out.append(ipaddress.ip_network(e.strip(), strict=False))
        except ValueError:
            raise ValueError(f"trusted proxy {e!r} is not an IP address or a CIDR network") from None
    return out


def _trusted(addr: str, proxies: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return any(ip in net for net in proxies)


def client_address(peer: str | None, forwarded_for: str | None, proxies: Sequence[Network]) -> str:
    """The client's address for rate limits and records (``"unknown"`` without a peer)."""
    if peer is None:
        return "unknown"
    if not forwarded_for or not _trusted(peer, proxies):
        return peer
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, proxies):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return peer  # a malformed entry written by a proxy we trust: stop believing the chain there
    return hops[0] if hops else peer
