"""Test certificates made with the ``openssl`` command: a CA, server certificates it signs (valid, expired, for
another host) and a self-signed one, for the TLS tests against the real Prometheus.

Keys are EC P-256 (fast to make). ``openssl ca`` signs with explicit start and end dates, which is how an expired
certificate is made without a fake clock (``openssl x509 -days`` cannot go negative in OpenSSL 3.0).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_CA_CONFIG = """[ ca ]
default_ca = test_ca
[ test_ca ]
dir = {dir}
database = $dir/index.txt
new_certs_dir = $dir/issued
serial = $dir/serial
default_md = sha256
policy = anything
copy_extensions = copy
unique_subject = no
[ anything ]
commonName = supplied
[ server ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = {san}
"""


class CertError(RuntimeError):
    """openssl failed; the message has its command and output."""


@dataclass(frozen=True)
class ServerCert:
    """A server certificate and key (PEM files)."""

    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise CertError("openssl not found; apt-get install openssl")
    done = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise CertError(f"openssl {' '.join(args)}: exited {done.returncode}: {done.stderr.strip()[-1000:]}")


def _key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path), cwd=path.parent)


class TestCA:
    """A throw-away certificate authority in ``folder``."""

    __test__ = False  # not a pytest class

    def __init__(self, folder: Path, name: str = "kvplan test CA") -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "issued").mkdir(exist_ok=True)
        (folder / "index.txt").write_text("")
        (folder / "serial").write_text("1000\n")
        self.key = folder / "ca.key"
        self.cert = folder / "ca.crt"
        _key(self.key)
        _openssl("req", "-x509", "-new", "-key", str(self.key), "-out", str(self.cert), "-days", "2", "-subj",
                 f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)

    @property
    def pem(self) -> str:
        return self.cert.read_text()

    def server(self, name: str, *, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), start: str | None = None,
               end: str | None = None) -> ServerCert:
        """A server certificate for ``hosts`` (IP addresses or DNS names), valid from ``start`` to ``end``
        (``YYMMDDHHMMSSZ``; default: from an hour ago for a day)."""
        import datetime as dt

        now = dt.datetime.now(dt.UTC)
        start = start or (now - dt.timedelta(hours=1)).strftime("%y%m%d%H%M%SZ")
        end = end or (now + dt.timedelta(days=1)).strftime("%y%m%d%H%M%SZ")
        san = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
        config = self.folder / f"{name}.cnf"
        config.write_text(_CA_CONFIG.format(dir=self.folder, san=san))
        key, csr, cert = (self.folder / f"{name}{ext}" for ext in (".key", ".csr", ".crt"))
        _key(key)
        _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={hosts[0]}", "-addext",
                 f"subjectAltName={san}", cwd=self.folder)
        _openssl("ca", "-batch", "-config", str(config), "-extensions", "server", "-in", str(csr), "-out", str(cert),
                 "-cert", str(self.cert), "-keyfile", str(self.key), "-startdate", start, "-enddate", end, "-notext",
                 cwd=self.folder)
        return ServerCert(cert, key)


def self_signed(folder: Path, name: str = "self", hosts: tuple[str, ...] = ("127.0.0.1",)) -> ServerCert:
    """A self-signed server certificate (no CA anyone trusts)."""
    folder.mkdir(parents=True, exist_ok=True)
    key, cert = folder / f"{name}.key", folder / f"{name}.crt"
    _key(key)
    san = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
    _openssl("req", "-x509", "-new", "-key", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={hosts[0]}",
             "-addext", f"subjectAltName={san}", cwd=folder)
    return ServerCert(cert, key)
