"""A test identity provider: an RS256 key, its JWKS (a file, and served over HTTP on a free
port), and tokens signed by it — what the custom auth example (examples/custom_auth) checks."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://idp.threadline.test/"
AUDIENCE = "threadline"
EXAMPLE_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "custom_auth" / "langgraph.json"


class Issuer:
    """Signs tokens; ``jwks_url`` serves the public half while :meth:`serve` runs."""

    def __init__(self, directory: Path) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:8]
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = {"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "RS256"}]}
        self.jwks_file = directory / "jwks.json"
        self.jwks_file.write_text(json.dumps(self.jwks))
        self._server: ThreadingHTTPServer | None = None

    def token(
        self,
        sub: str,
        *,
        expires_in: float = 600,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
        **claims: object,
    ) -> str:
        now = int(time.time())
        payload = {
            "sub": sub,
            "iss": ISSUER,
            "aud": AUDIENCE,
            "iat": now,
            "exp": now + int(expires_in),
            **claims,
        }
        return jwt.encode(payload, key or self.key, algorithm="RS256", headers={"kid": kid or self.kid})

    def serve(self) -> str:
        """Serve the JWKS on a free port; returns its URL."""
        body = json.dumps(self.jwks).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}/.well-known/jwks.json"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def example_env(jwks: str, **extra: str) -> dict[str, str]:
    """A replica serving the custom auth example, validating tokens against ``jwks``."""
    return {
        "LANGGRAPH_CONFIG": str(EXAMPLE_CONFIG),
        "AUTH_JWKS": jwks,
        "AUTH_ISSUER": ISSUER,
        "AUTH_AUDIENCE": AUDIENCE,
        **extra,
    }
