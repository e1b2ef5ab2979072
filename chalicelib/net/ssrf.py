"""SSRF validator (WeKnora `utils/security.go`): scheme, length, names, literal/encoded IPs, resolved
addresses and ports. Returns the validated addresses so the client can pin its connection to them."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

MAX_URL_LENGTH = 2048
ALLOWED_SCHEMES = frozenset({"http", "https"})

BLOCKED_HOSTNAMES = frozenset(
    {
        "localhost",
        "localhost.localdomain",
        "ip6-localhost",
        "ip6-loopback",
        "broadcasthost",
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.com",
        "metadata.tencentyun.com",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "host.docker.internal",
        "gateway.docker.internal",
        "docker",
        "docker.for.mac.localhost",
        "host.containers.internal",
    }
)
BLOCKED_SUFFIXES = (
    ".localhost",
    ".local",
    ".localdomain",
    ".internal",
    ".intranet",
    ".corp",
    ".lan",
    ".home",
    ".home.arpa",
    ".private",
    ".svc",
    ".cluster.local",
    ".docker",
    ".kubernetes",
    ".arpa",
)
# SSH, Telnet, SMTP, SMB/NetBIOS/RPC, RDP, databases, caches, etcd, Consul, Docker/Kubelet APIs.
BLOCKED_PORTS = frozenset(
    {
        22,
        23,
        25,
        465,
        587,
        135,
        137,
        138,
        139,
        445,
        3389,
        1433,
        1521,
        3306,
        5432,
        5984,
        6379,
        7000,
        7001,
        9042,
        11211,
        27017,
        27018,
        2375,
        2376,
        2379,
        2380,
        8300,
        8301,
        8302,
        8500,
        8600,
        10250,
        10255,
    }
)

_EXTRA_V4 = [
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
]
_EXTRA_V6 = [
    ipaddress.ip_network(n)
    for n in (
        "::/128",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
        "100::/64",
        "2001:db8::/32",
    )
]
_TEREDO = ipaddress.ip_network("2001::/32")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPAT = ipaddress.ip_network("::/96")

# Anything that inet_aton would take as an IPv4 address: decimal, octal, hex, dotted shorthand.
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]*))*\.?$", re.IGNORECASE)


class BlockKind(StrEnum):
    """The kind of a refusal, in fixed words: what may be said of a URL the remote server wrote (a
    redirect's target), whose host, scheme and path are text of the server's choosing."""

    MALFORMED = "malformed URL"
    SCHEME = "scheme not allowed"
    PORT = "port not allowed"
    ENCODED_ADDRESS = "IP address in an encoded form"
    INTERNAL_NAME = "internal host name"
    INTERNAL_ADDRESS = "internal address"
    INVALID_ADDRESS = "invalid address"
    UNRESOLVED = "host does not resolve"


#: the API's codes for a refused URL (400 at request time, the row's error code in the worker)
CODE_BLOCKED = "ssrf_blocked"
CODE_UNRESOLVED = "host_unresolved"


class URLBlocked(ValueError):
    """The URL may not be fetched; `reason` says why in words a user understands (naming the URL's own
    host or scheme), `kind` says it in fixed words."""

    code = CODE_BLOCKED

    def __init__(self, url: str, reason: str, kind: BlockKind):
        super().__init__(f"URL not allowed: {reason}")
        self.url = url
        self.reason = reason
        self.kind = kind


class HostUnresolved(URLBlocked):
    """The host has no address: a DNS failure, not a forbidden target. `transient` when the resolver only
    could not answer now (EAI_AGAIN), so a later try may succeed."""

    code = CODE_UNRESOLVED

    def __init__(self, url: str, host: str, *, transient: bool = False):
        super().__init__(url, f"host '{host}' does not resolve", BlockKind.UNRESOLVED)
        self.transient = transient


#: a trusted entry without a port is trusted on the web's ports only, never on every port
DEFAULT_TRUSTED_PORTS: frozenset[int] = frozenset({80, 443})
AnyPort = None


def _split_port(entry: str) -> tuple[str, frozenset[int] | None]:
    """`host`, `host:8000`, `host:*`, `10.0.0.0/8:8000`, `[fd00::/8]:8000` → (target, ports or None=any)."""
    if entry.startswith("["):
        target, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        target, _, port = entry.partition(":")
    else:  # a bare IPv6 address or network
        target, port = entry, ""
    if not port:
        return target, DEFAULT_TRUSTED_PORTS
    if port == "*":
        return target, AnyPort
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"allow-list entry {entry!r}: port must be 1-65535 or *")
    return target, frozenset({int(port)})


def _port_ok(ports: frozenset[int] | None, port: int) -> bool:
    return ports is None or port in ports


@dataclass(frozen=True)
class AllowList:
    """Hosts, `*.domain` patterns and CIDRs the operator trusts (SSRF_WHITELIST), each on its ports:
    `files.lan` (80 and 443), `files.lan:8080`, `files.lan:*` (any port), `10.0.0.0/8:9000`."""

    hosts: tuple[tuple[str, frozenset[int] | None], ...] = ()
    suffixes: tuple[tuple[str, frozenset[int] | None], ...] = ()
    networks: tuple[tuple[IPNetwork, frozenset[int] | None], ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str] | str | None) -> AllowList:
        if entries is None:
            return cls()
        if isinstance(entries, str):
            entries = [e for e in re.split(r"[,\s]+", entries) if e]
        hosts: list[tuple[str, frozenset[int] | None]] = []
        suffixes: list[tuple[str, frozenset[int] | None]] = []
        nets: list[tuple[IPNetwork, frozenset[int] | None]] = []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            target, ports = _split_port(entry)
            target = target.rstrip(".")
            if target.startswith("*."):
                suffixes.append((target[1:], ports))
                continue
            try:
                nets.append((ipaddress.ip_network(target, strict=False), ports))
            except ValueError:
                hosts.append((target, ports))
        return cls(tuple(hosts), tuple(suffixes), tuple(nets))

    def host_allowed(self, host: str, port: int) -> bool:
        return any(host == h and _port_ok(p, port) for h, p in self.hosts) or any(
            (host.endswith(s) or host == s[1:]) and _port_ok(p, port) for s, p in self.suffixes
        )

    def ip_allowed(self, ip: IPAddress, port: int) -> bool:
        return any(ip.version == n.version and ip in n and _port_ok(p, port) for n, p in self.networks)

    def __add__(self, other: AllowList) -> AllowList:
        return AllowList(
            self.hosts + other.hosts, self.suffixes + other.suffixes, self.networks + other.networks
        )

    def __bool__(self) -> bool:
        return bool(self.hosts or self.suffixes or self.networks)


@dataclass(frozen=True)
class ValidatedURL:
    url: str
    scheme: str
    host: str  # lower-case, IDNA-encoded, no brackets
    port: int
    addresses: tuple[str, ...] = field(default_factory=tuple)  # the IPs the connection may use

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


def default_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        addr = str(info[4][0]).split("%", 1)[0]
        if addr not in seen:
            seen.append(addr)
    return seen


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries: mapped, compatible, 6to4, Teredo, NAT64."""
    found: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip in _TEREDO and ip.teredo is not None:
        found.extend(ip.teredo)
    if ip in _NAT64 or ip in _NAT64_LOCAL or (ip in _IPV4_COMPAT and int(ip) > 1):
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def ip_block_reason(ip: IPAddress) -> str | None:
    """Why an address is not public, or None when it may be reached."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return "scoped IPv6 address"
        for v4 in embedded_ipv4(ip):
            inner = ip_block_reason(v4)
            if inner:
                return f"IPv6 address embedding a {inner}"
        if any(ip in n for n in _EXTRA_V6):
            return "private or reserved IPv6 address"
    elif any(ip in n for n in _EXTRA_V4):
        if ip in ipaddress.ip_network("169.254.0.0/16"):
            return "link-local or cloud metadata address"
        if ip in ipaddress.ip_network("100.64.0.0/10"):
            return "carrier-grade NAT address"
        if ip.is_loopback:
            return "loopback address"
        return "private or reserved IPv4 address"
    if ip.is_loopback:
        return "loopback address"
    if ip.is_link_local:
        return "link-local address"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return "reserved address"
    if ip.is_private or not ip.is_global:
        return "private address"
    return None


def _parse_literal_ip(host: str) -> tuple[IPAddress | None, bool]:
    """(address, canonical) for a host written as an IP in any form; (None, False) for a name."""
    try:
        return ipaddress.ip_address(host), True
    except ValueError:
        pass
    if _NUMERIC_HOST.match(host):
        try:
            packed = socket.inet_aton(host.rstrip("."))
        except OSError:
            return None, False
        return ipaddress.IPv4Address(packed), False
    return None, False


def _idna(host: str) -> str:
    try:
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise ValueError("host name is not valid") from exc


def validate_url(
    url: str,
    allow_list: AllowList | None = None,
    *,
    resolver: Resolver | None = None,
    resolve: bool = True,
) -> ValidatedURL:
    """Raises URLBlocked unless the URL is a public http(s) address. `resolve=False` skips DNS."""
    allow = allow_list or AllowList()
    if not isinstance(url, str) or not url.strip():
        raise URLBlocked(str(url), "empty URL", BlockKind.MALFORMED)
    if len(url) > MAX_URL_LENGTH:
        raise URLBlocked(url[:100], f"URL longer than {MAX_URL_LENGTH} characters", BlockKind.MALFORMED)
    if any(ord(ch) < 0x21 or ch == "\\" for ch in url.strip()):
        raise URLBlocked(url, "URL contains control characters, spaces or backslashes", BlockKind.MALFORMED)
    try:
        parts = urlsplit(url.strip())
        port_raw = parts.port
    except ValueError as exc:
        raise URLBlocked(url, "malformed URL or port", BlockKind.MALFORMED) from exc
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        raise URLBlocked(
            url, f"scheme '{scheme or '(none)'}' is not allowed; use http or https", BlockKind.SCHEME
        )
    raw_host = parts.hostname or ""
    if not raw_host:
        raise URLBlocked(url, "URL has no host", BlockKind.MALFORMED)
    if "%" in raw_host:
        raise URLBlocked(url, "percent-encoded or zone-scoped host", BlockKind.MALFORMED)
    try:
        host = _idna(raw_host.rstrip("."))
    except ValueError as exc:
        raise URLBlocked(url, str(exc), BlockKind.MALFORMED) from exc
    port = port_raw if port_raw is not None else (443 if scheme == "https" else 80)
    if port == 0 or port in BLOCKED_PORTS:
        raise URLBlocked(url, f"port {port} is not allowed", BlockKind.PORT)

    host_listed = allow.host_allowed(host, port)
    literal, canonical = _parse_literal_ip(host)
    if literal is not None:
        if not canonical:
            raise URLBlocked(
                url,
                "IP address written in an encoded form (decimal, octal or hex)",
                BlockKind.ENCODED_ADDRESS,
            )
        if not allow.ip_allowed(literal, port):
            reason = ip_block_reason(literal)
            if reason:
                raise URLBlocked(url, reason, BlockKind.INTERNAL_ADDRESS)
        return ValidatedURL(url, scheme, host, port, (str(literal),))

    if not host_listed:
        if host in BLOCKED_HOSTNAMES or "." not in host:
            raise URLBlocked(url, f"host '{host}' is an internal name", BlockKind.INTERNAL_NAME)
        if host.endswith(BLOCKED_SUFFIXES):
            raise URLBlocked(url, f"host '{host}' has an internal domain suffix", BlockKind.INTERNAL_NAME)
    if not resolve:
        return ValidatedURL(url, scheme, host, port, ())
    try:
        addresses = (resolver or default_resolver)(host, port)
    except (OSError, UnicodeError) as exc:
        again = isinstance(exc, socket.gaierror) and exc.errno == socket.EAI_AGAIN
        raise HostUnresolved(url, host, transient=again) from exc
    if not addresses:
        raise HostUnresolved(url, host)
    checked: list[str] = []
    for addr in addresses:
        try:
            ip = ipaddress.ip_address(addr.split("%", 1)[0])
        except ValueError as exc:
            raise URLBlocked(
                url, f"host '{host}' resolved to an invalid address", BlockKind.INVALID_ADDRESS
            ) from exc
        if not (host_listed or allow.ip_allowed(ip, port)):
            reason = ip_block_reason(ip)
            if reason:
                raise URLBlocked(url, f"host '{host}' resolves to a {reason}", BlockKind.INTERNAL_ADDRESS)
        checked.append(str(ip))
    return ValidatedURL(url, scheme, host, port, tuple(checked))


def is_url_safe(url: str, allow_list: AllowList | None = None, *, resolver: Resolver | None = None) -> bool:
    try:
        validate_url(url, allow_list, resolver=resolver)
    except URLBlocked:
        return False
    return True


def check_addresses(addresses: Sequence[str], port: int, allow_list: AllowList | None = None) -> str | None:
    """The first blocked reason among addresses (used when a connection is about to be made)."""
    allow = allow_list or AllowList()
    for addr in addresses:
        ip = ipaddress.ip_address(addr)
        if not allow.ip_allowed(ip, port):
            reason = ip_block_reason(ip)
            if reason:
                return reason
    return None
