"""Certificates for the rig, made with the openssl command line (no Python crypto dependency)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


class CA:
    """A self-signed CA that issues server and client certificates into one directory."""

    def __init__(self, directory: Path, name: str):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.cert = directory / f"{name}-ca.crt"
        self.key = directory / f"{name}-ca.key"
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                 "-subj", f"/CN={name}-ca", "-keyout", str(self.key), "-out", str(self.cert))

    def issue(self, name: str, cn: str, *, org: str | None = None, hosts: tuple[str, ...] = (),
              client: bool = False) -> Pair:
        """Issues `name`.crt/.key; `hosts` become DNS or IP subjectAltNames."""
        key, csr, crt = (self.dir / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        subject = f"/CN={cn}" + (f"/O={org}" if org else "")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                 "-keyout", str(key), "-out", str(csr))
        ext = self.dir / f"{name}.ext"
        lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment",
                 f"extendedKeyUsage={'clientAuth' if client else 'serverAuth,clientAuth'}"]
        if hosts:
            sans = ",".join(
                f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
            lines.append(f"subjectAltName={sans}")
        ext.write_text("\n".join(lines) + "\n")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
                 "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(crt))
        return Pair(crt, key)


def service_account_keys(directory: Path) -> Pair:
    """The key pair the apiserver signs and verifies service-account tokens with."""
    key, pub = directory / "sa.key", directory / "sa.pub"
    _openssl("genrsa", "-out", str(key), "2048")
    _openssl("rsa", "-in", str(key), "-pubout", "-out", str(pub))
    return Pair(pub, key)
