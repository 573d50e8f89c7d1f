"""The address a request comes from, as the fair share counts it (lab.fair_share, panels.visitor_gate).

The connection's peer, unless that peer is a proxy this Space trusts: then the X-Forwarded-For entry that proxy
wrote (the last one that is not itself a trusted proxy; the entries before it come from the client and can be
anything). A client that connects directly never chooses its address with a header.

Trusted proxies: SPECVIZ_TRUSTED_PROXIES, comma-separated addresses or networks ("none" for none). Unset, a Hugging
Face Space (SPACE_ID set) trusts the private ranges its ingress connects from (the container sees the proxy as an
address like 10.16.3.80; nothing else can reach it), and anywhere else nothing is trusted. An IPv6 address counts as
its /64: one machine is usually given a whole /64, so its addresses are one visitor."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from functools import lru_cache

from specviz.runtime.placement import on_space

TRUSTED_PROXIES_VARIABLE = "SPECVIZ_TRUSTED_PROXIES"
SPACE_PROXIES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
UNKNOWN = "unknown"
MAX_FORWARDED_ENTRIES = 16  # a longer chain is the client's own padding: read no further back than this


@dataclass(frozen=True)
class TrustedProxies:
    networks: tuple  # ipaddress networks

    @classmethod
    def parse(cls, text: str) -> "TrustedProxies":
        """Comma-separated addresses or networks; "none" or "" for none. A word that is neither is refused, so a
        typo never trusts nothing silently."""
        names = [n.strip() for n in text.split(",") if n.strip() and n.strip().lower() != "none"]
        try:
            return cls(tuple(ipaddress.ip_network(n, strict=False) for n in names))
        except ValueError as error:
            raise ValueError(f"{TRUSTED_PROXIES_VARIABLE} lists addresses or networks: {error}") from None

    @classmethod
    def from_environment(cls) -> "TrustedProxies":
        given = os.environ.get(TRUSTED_PROXIES_VARIABLE)
        if given is not None:
            return cls.parse(given)
        return cls.parse(",".join(SPACE_PROXIES)) if on_space() else cls(())

    def trusts(self, host: str | None) -> bool:
        ip = _ip(host)
        return ip is not None and any(ip in network for network in self.networks if network.version == ip.version)

    def address(self, forwarded: str | None, peer: str | None) -> str:
        """The visitor's address (the key the fair share counts): see the module's note."""
        if not forwarded or not self.trusts(peer):
            return visitor_key(peer)
        for entry in reversed(forwarded.split(",")[-MAX_FORWARDED_ENTRIES:]):
            entry = entry.strip()
            if not self.trusts(entry):
                return visitor_key(entry) if _ip(entry) is not None else visitor_key(peer)
        return visitor_key(peer)


def _ip(host: str | None):
    if not host:
        return None
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    return ip.ipv4_mapped or ip if ip.version == 6 else ip


def visitor_key(host: str | None) -> str:
    """An address as one visitor: IPv4 as it is, IPv6 as its /64 network; anything else (a unix socket's name)
    cut short."""
    ip = _ip(host)
    if ip is None:
        return (host or UNKNOWN)[:64]
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


@lru_cache(maxsize=1)
def trusted_proxies() -> TrustedProxies:
    """This process's trusted proxies, read once from the environment."""
    return TrustedProxies.from_environment()


def address_of(forwarded: str | None, peer: str | None) -> str:
    return trusted_proxies().address(forwarded, peer)
