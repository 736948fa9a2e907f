"""An https webhook connects to the address it checked while TLS still speaks to, and verifies,
the URL's name (ADR 0020): a real TLS receiver on loopback with a certificate for
``localhost`` made here (``cryptography``), trusted by the deliverer in this process — a
replica trusts only public CAs, so this one cannot run in a replica."""

from __future__ import annotations

import asyncio
import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from threadline import metrics
from threadline.config import WebhookSettings
from threadline.hosts import HostList
from threadline.runs.records import RunRecord, now_iso
from threadline.webhooks import WebhookPolicy, Webhooks

from servers import until

pytestmark = pytest.mark.integration


def certificate(tmp_path) -> tuple[str, str]:
    """A self-signed certificate for ``localhost`` (no IP in it): (cert file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(cert_file), str(key_file)


def run_record(url: str) -> RunRecord:
    now = now_iso()
    return RunRecord("r-1", "t-1", "alice", "a-1", now, now, "running", {}, "enqueue", {"webhook": url})


async def test_https_pins_the_checked_address_and_verifies_the_urls_name(tmp_path) -> None:
    cert_file, key_file = certificate(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert_file, key_file)
    names: list[str | None] = []
    server_tls.sni_callback = lambda sock, name, ctx: names.append(name)
    requests: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        requests.append(head + await reader.readexactly(length))
        writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_tls)
    port = server.sockets[0].getsockname()[1]
    trust = ssl.create_default_context(cafile=cert_file)
    policy = WebhookPolicy(allowed=HostList.parse(["localhost", "127.0.0.1"], "test"))

    async def values(run: RunRecord) -> dict:
        return {"answer": 42}

    settings = WebhookSettings(retries=0, timeout_seconds=5)
    hooks = Webhooks(settings, policy, values, verify=trust)
    delivered = metrics.WEBHOOK_DELIVERIES.labels("delivered")
    failed = metrics.WEBHOOK_DELIVERIES.labels("failed")
    before_ok, before_failed = delivered._value.get(), failed._value.get()
    try:
        hooks.finished(run_record(f"https://localhost:{port}/hook"), "success", b"{}", None)
        await until(lambda: requests, "the https POST")
        # Connected to 127.0.0.1 (after ::1, if localhost resolved to it first) with TLS for
        # the name: SNI and the Host header are the URL's.
        assert names == ["localhost"]
        assert f"host: localhost:{port}".encode() in requests[0].lower()
        assert b'"values":{"answer":42}' in requests[0]
        await until(lambda: delivered._value.get() == before_ok + 1, "counted delivered")
        # By its address alone the certificate (for localhost only) does not verify: the name
        # checked is the URL's, never skipped.
        hooks.finished(run_record(f"https://127.0.0.1:{port}/hook"), "success", b"{}", None)
        await until(lambda: failed._value.get() == before_failed + 1, "the unverifiable POST failed")
        assert len(requests) == 1
    finally:
        await hooks.aclose()
        server.close()
        await server.wait_closed()
