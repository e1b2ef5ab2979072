"""SSRF validator: hostile URLs are blocked, public ones pass, the allow-list opens loopback for tests."""

import ipaddress

import pytest

from chalicelib.net.ssrf import AllowList, URLBlocked, embedded_ipv4, ip_block_reason, validate_url
from chalicelib.settings import load_settings


def public_resolver(host: str, port: int) -> list[str]:
    return ["93.184.216.34"]


def resolver_from(table: dict[str, list[str]]):
    def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError("NXDOMAIN")
        return table[host]

    return resolve


HOSTILE = [
    "file:///etc/passwd",
    "gopher://example.com/",
    "ftp://example.com/file.pdf",
    "dict://example.com:11211/",
    "javascript:alert(1)",
    "data:text/html,hello",
    "http://",
    "http:///path",
    "http://localhost/",
    "http://LOCALHOST:8080/",
    "http://localhost./",
    "http://sub.localhost/",
    "http://127.0.0.1/",
    "http://127.1/",
    "http://127.0.1/",
    "http://0/",
    "http://0.0.0.0/",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0x7f.0x0.0x0.0x1/",
    "http://017700000001/",
    "http://0177.0.0.1/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://172.17.0.1/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",
    "http://100.100.100.200/",
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.170.2/v2/credentials",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://198.18.0.1/",
    "http://[::1]/",
    "http://[::]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[2002:7f00:1::]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",  # Teredo whose client is 127.0.0.1
    "http://[64:ff9b::a00:1]/",  # NAT64 of 10.0.0.1
    "http://[fe80::1]/",
    "http://[fc00::1]/",
    "http://[fd00:ec2::254]/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata/",
    "http://instance-data/latest/",
    "http://kubernetes.default.svc/",
    "http://host.docker.internal/",
    "http://printer.local/",
    "http://db.internal/",
    "http://git.corp/",
    "http://nas.lan/",
    "http://router.home.arpa/",
    "http://intranet/",
    "http://example.com:22/",
    "http://example.com:25/",
    "http://example.com:445/",
    "http://example.com:3306/",
    "http://example.com:5432/",
    "http://example.com:6379/",
    "http://example.com:2379/",
    "http://example.com:8500/",
    "http://example.com:3389/",
    "http://example.com:11211/",
    "http://example.com:0/",
    "http://example.com:99999/",
    "http://exa mple.com/",
    "http://example.com\\@127.0.0.1/",
    "http://%31%32%37.0.0.1/",
    "http://[fe80::1%25eth0]/",
    "http://example.com/" + "a" * 2100,
    "http://evil.example.net/",  # resolves to a private address (table below)
    "http://mixed.example.net/",  # one public, one private address
    "http://six.example.net/",  # resolves to an IPv4-mapped loopback
    "http://nxdomain.example.net/",
]

RESOLVE_TABLE = {
    "example.com": ["93.184.216.34"],
    "evil.example.net": ["10.1.2.3"],
    "mixed.example.net": ["93.184.216.34", "192.168.0.10"],
    "six.example.net": ["::ffff:127.0.0.1"],
}


@pytest.mark.parametrize("url", HOSTILE)
def test_hostile_urls_are_blocked(url: str) -> None:
    with pytest.raises(URLBlocked) as err:
        validate_url(url, resolver=resolver_from(RESOLVE_TABLE))
    assert err.value.reason


def test_suite_is_large_enough() -> None:
    assert len(HOSTILE) >= 40


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/",
        "https://example.com/docs/a.pdf?x=1#frag",
        "https://EXAMPLE.com:8443/a",
        "http://93.184.216.34/",
        "http://[2606:2800:220:1:248:1893:25c8:1946]/",
        "https://bücher.example/",
    ],
)
def test_public_urls_pass(url: str) -> None:
    result = validate_url(url, resolver=public_resolver)
    assert result.scheme in ("http", "https")
    assert result.addresses
    assert all(ip_block_reason(ipaddress.ip_address(a)) is None for a in result.addresses)


def test_idna_host_is_encoded() -> None:
    assert validate_url("https://bücher.example/", resolver=public_resolver).host == "xn--bcher-kva.example"


def test_encoded_ip_reason_names_the_encoding() -> None:
    with pytest.raises(URLBlocked, match="encoded"):
        validate_url("http://2130706433/")


def test_allow_list_cidr_opens_loopback() -> None:
    allow = AllowList.parse("127.0.0.0/8:*")
    assert validate_url("http://127.0.0.1:8080/x", allow).addresses == ("127.0.0.1",)
    with pytest.raises(URLBlocked):
        validate_url("http://10.0.0.1/", allow)  # only the listed range opens


def test_allow_list_host_and_wildcard() -> None:
    table = resolver_from(
        {"files.lan": ["192.168.1.5"], "a.intra.example": ["10.0.0.7"], "intra.example": ["10.0.0.8"]}
    )
    allow = AllowList.parse(["files.lan", "*.intra.example"])
    assert validate_url("http://files.lan/doc.pdf", allow, resolver=table).addresses == ("192.168.1.5",)
    assert validate_url("http://a.intra.example/", allow, resolver=table).host == "a.intra.example"
    assert validate_url("http://intra.example/", allow, resolver=table).host == "intra.example"
    with pytest.raises(URLBlocked):
        validate_url("http://other.lan/", allow, resolver=resolver_from({"other.lan": ["192.168.1.6"]}))


def test_allow_list_from_the_settings() -> None:
    settings = load_settings(
        {"SSRF_WHITELIST": "127.0.0.1/32, trusted.example", "SSRF_WHITELIST_EXTRA": "*.corp.example"}
    )
    allow = AllowList.parse(settings.ssrf_allow)
    assert allow.host_allowed("trusted.example", 443)
    assert allow.host_allowed("x.corp.example", 80)
    assert allow.ip_allowed(ipaddress.ip_address("127.0.0.1"), 443)
    assert not allow.ip_allowed(ipaddress.ip_address("127.0.0.2"), 443)


def test_a_trusted_host_is_trusted_on_its_ports_only() -> None:
    """Regression (issue 9): a whitelisted host used to be trusted on every port, so an allow-listed
    file server also opened its neighbours (a database admin port, the metadata proxy)."""
    table = resolver_from({"files.lan": ["192.168.1.5"]})
    web = AllowList.parse("files.lan")
    assert validate_url("https://files.lan/a.pdf", web, resolver=table).port == 443
    with pytest.raises(URLBlocked, match="internal"):
        validate_url("http://files.lan:8081/", web, resolver=table)
    exact = AllowList.parse(["files.lan:8081", "10.1.0.0/16:9000", "[fd00::/8]:7443"])
    assert validate_url("http://files.lan:8081/", exact, resolver=table).port == 8081
    assert validate_url("http://10.1.2.3:9000/", exact).port == 9000
    with pytest.raises(URLBlocked):
        validate_url("http://10.1.2.3:9001/", exact)
    assert validate_url("http://[fd00::5]:7443/", exact).port == 7443
    anywhere = AllowList.parse("files.lan:*")
    assert validate_url("http://files.lan:8081/", anywhere, resolver=table).port == 8081
    with pytest.raises(ValueError):
        AllowList.parse("files.lan:99999")


def test_blocked_ports_stay_blocked_for_allow_listed_hosts() -> None:
    with pytest.raises(URLBlocked, match="port"):
        validate_url("http://127.0.0.1:6379/", AllowList.parse("127.0.0.0/8:*"))


def test_embedded_ipv4_forms() -> None:
    assert embedded_ipv4(ipaddress.IPv6Address("::ffff:10.0.0.1")) == [ipaddress.IPv4Address("10.0.0.1")]
    assert ipaddress.IPv4Address("127.0.0.1") in embedded_ipv4(ipaddress.IPv6Address("2002:7f00:1::"))
    teredo = embedded_ipv4(ipaddress.IPv6Address("2001:0:4136:e378:8000:63bf:80ff:fffe"))
    assert ipaddress.IPv4Address("127.0.0.1") in teredo
    assert embedded_ipv4(ipaddress.IPv6Address("2606:2800:220:1::1")) == []
