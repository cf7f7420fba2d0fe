"""https through ssl.MemoryBIO: the stream works, kernel stamps stay, bad certificates fail."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path

import orjson
import pytest

from tokenwatt.client import StreamClient
from tokenwatt.records import RequestRecord
from tokenwatt.spec.endpoint import Timeouts

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not found")


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    key, crt = d / "key.pem", d / "cert.pem"
    args = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    subprocess.run(
        [
            "openssl",
            *args,
            "-keyout",
            str(key),
            "-out",
            str(crt),
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return crt, key


def _event(text: str, fr: str | None = None) -> bytes:
    obj = {"choices": [{"index": 0, "text": text, "finish_reason": fr}]}
    data = b"data: " + orjson.dumps(obj) + b"\n\n"
    return b"%x\r\n" % len(data) + data + b"\r\n"


async def _serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:  # keep-alive, 3 chunks 5 ms apart per request
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(n)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            for i, t in enumerate(["a", "b", "c"]):
                writer.write(_event(t, "length" if i == 2 else None))
                await writer.drain()
                await asyncio.sleep(0.005)
            writer.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def _run(crt: Path, key: Path, trust: bool) -> tuple[list[RequestRecord], StreamClient]:
    sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    sctx.load_cert_chain(crt, key)
    server = await asyncio.start_server(_serve, "127.0.0.1", 0, ssl=sctx)
    port = server.sockets[0].getsockname()[1]
    cctx = ssl.create_default_context(cafile=str(crt)) if trust else None
    c = StreamClient(
        f"https://127.0.0.1:{port}/v1",
        api="completions",
        model="m",
        timeouts=Timeouts(connect_s=3, first_token_s=5, idle_s=5, total_s=10),
        ssl_context=cctx,
    )
    recs = []
    for i in range(3):
        recs.append(
            await c.stream(
                request_id=i, scheduled_ns=0, prompt="x", max_tokens=3, prompt_tokens_client=1
            )
        )
    await c.aclose()
    server.close()
    return recs, c


def test_https_stream_keeps_kernel_stamps_and_reuses_the_connection(
    cert: tuple[Path, Path],
) -> None:
    recs, c = asyncio.run(_run(*cert, trust=True))
    for r in recs:
        assert r.ok, r
        assert len(r.chunk_ns) == 3 and r.saw_done and r.finish_reason == "length"
        assert r.timestamp_source == c.clock.timestamp_source
        assert r.sent_ns is not None and r.sent_ns <= r.chunk_ns[0] <= r.chunk_ns[-1]
        assert r.chunk_ns[2] - r.sent_ns >= 8_000_000  # after two 5 ms pauses, loosely
    assert c.connections_opened == 1
    assert [r.connection_reused for r in recs] == [False, True, True]


def test_untrusted_certificate_is_a_connect_failure(cert: tuple[Path, Path]) -> None:
    recs, _ = asyncio.run(_run(*cert, trust=False))
    for r in recs:
        assert r.status == "error" and r.error_kind == "connect"
        assert r.error_message is not None and "CERTIFICATE_VERIFY_FAILED" in r.error_message
