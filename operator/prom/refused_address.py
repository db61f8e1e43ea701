"""Which addresses the operator never sends a Prometheus request to (unless its admin allows one by name): the
link-local ranges and the cloud metadata addresses, where instance credentials are served, *under any embedding
of an IPv4 address in IPv6* that a host or a NAT64/6to4/Teredo/ISATAP gateway would route to the IPv4 address.

IPv6 forms that carry an IPv4 address, each read by :func:`embedded_ipv4`:

- IPv4-mapped ``::ffff:a.b.c.d`` (``::ffff:0:0/96``), IPv4-translated ``::ffff:0:a.b.c.d`` (SIIT,
  ``::ffff:0:0:0/96``) and the deprecated IPv4-compatible ``::a.b.c.d`` (``::/96``);
- NAT64: the well-known prefix ``64:ff9b::/96`` (RFC 6052) and the local-use ``64:ff9b:1::/48`` (RFC 8215) at
  every RFC 6052 position a /48, /56, /64 or /96 prefix inside it uses;
- 6to4 ``2002:AABB:CCDD::/48`` (RFC 3056), Teredo ``2001:0::/32`` (server and obfuscated client, RFC 4380), and
  ISATAP interface identifiers ``...:0:5efe:a.b.c.d`` / ``...:200:5efe:a.b.c.d`` under any prefix (RFC 5214).

A network-specific NAT64 prefix (one a cluster chooses) cannot be recognised from the address: an operator on
such a network sets ``prometheus.allowedHosts``, which then decides alone.
"""

from __future__ import annotations

import ipaddress

#: Refused IPv4 networks: link-local (AWS/GCP/Azure/OCI metadata is 169.254.169.254), Alibaba's 100.100.100.200 and
#: OCI's legacy 192.0.0.192.
REFUSED_V4 = tuple(ipaddress.IPv4Network(n) for n in ("169.254.0.0/16", "100.100.100.200/32", "192.0.0.192/32"))
#: Refused IPv6 networks: link-local, AWS's metadata fd00:ec2::254 and GCP's fd20:ce::254.
REFUSED_V6 = tuple(ipaddress.IPv6Network(n) for n in ("fe80::/10", "fd00:ec2::254/128", "fd20:ce::254/128"))
REFUSED_NETWORKS: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = REFUSED_V4 + REFUSED_V6

_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64_WKP = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
#: RFC 6052 section 2.2: for each prefix length, the bit ranges (from the top, [start, end)) holding the IPv4
#: address (bits 64-71 are the reserved ``u`` octet).
_RFC6052 = {32: ((32, 64),), 40: ((40, 64), (72, 80)), 48: ((48, 64), (72, 88)), 56: ((56, 64), (72, 96)),
            64: ((72, 104),), 96: ((96, 128),)}


def _bits(value: int, start: int, end: int) -> int:
    return (value >> (128 - end)) & ((1 << (end - start)) - 1)


def _rfc6052(value: int, length: int) -> ipaddress.IPv4Address:
    out = 0
    for start, end in _RFC6052[length]:
        out = (out << (end - start)) | _bits(value, start, end)
    return ipaddress.IPv4Address(out)


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address ``ip`` carries in one of the forms of the module docstring (may be empty)."""
    value = int(ip)
    low32 = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    out: list[ipaddress.IPv4Address] = []
    if ip in _MAPPED or ip in _TRANSLATED or ip in _COMPATIBLE or ip in _NAT64_WKP:
        out.append(low32)
    if ip in _NAT64_LOCAL:
        out.extend(_rfc6052(value, n) for n in (48, 56, 64, 96))
    if ip.sixtofour is not None:
        out.append(ip.sixtofour)
    if ip.teredo is not None:
        out.extend(ip.teredo)
    if _bits(value, 64, 96) & ~0x03000000 == 0x00005EFE:  # ISATAP, the u/g bits either way
        out.append(low32)
    return out


def refused_address(text: str) -> bool:
    """Whether ``text`` (an IP address, an IPv6 zone id ignored) is a refused address or embeds one; a text that is
    not an IP address is not (names are resolved and each address checked)."""
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0].strip("[]"))
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv4Address):
        return any(ip in net for net in REFUSED_V4)
    if any(ip in net for net in REFUSED_V6):
        return True
    return any(v4 in net for v4 in embedded_ipv4(ip) for net in REFUSED_V4)
