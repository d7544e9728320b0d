"""Certificates and keys of the real control plane (test infrastructure).

Two CAs as kubeadm lays them out: the cluster CA (API server serving cert and
every client cert: admin, controller manager, scheduler, the API server's own
kubelet client) and the front-proxy CA (the aggregator's requestheader client
cert). Plus the service-account signing key pair. Files are written once into
``<state>/pki`` and reused on a restart, so tokens and kubeconfigs stay valid.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    tmp.replace(path)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _new_key():
    return ec.generate_private_key(ec.SECP256R1())


def _ca(cn: str):
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY * 10)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(ca_cert, ca_key, cn, orgs=(), *, server=False, client=False, dns=(), ips=()):
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, tuple(orgs)))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                key_cert_sign=False,
                crl_sign=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(ca_key, hashes.SHA256()), key


@dataclass
class Pki:
    """Paths of every file; ``ensure()`` creates the missing ones."""

    dir: Path

    def path(self, name: str) -> Path:
        return self.dir / name

    # cluster CA and its leaves: name -> (CN, O, server, client)
    LEAVES = {
        "apiserver": ("kube-apiserver", (), True, False),
        "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("kubeadm:cluster-admins",), False, True),
        "admin": ("kubernetes-admin", ("system:masters",), False, True),
        "controller-manager": ("system:kube-controller-manager", (), False, True),
        "scheduler": ("system:kube-scheduler", (), False, True),
    }

    def ensure(self, service_ip: str) -> Pki:
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        ca_cert, ca_key = self._ca("ca", "workspacespawner-realplane-ca")
        for name, (cn, orgs, server, client) in self.LEAVES.items():
            if self.path(f"{name}.crt").exists() and self.path(f"{name}.key").exists():
                continue
            kw = {}
            if server:
                kw = {
                    "dns": (
                        "localhost",
                        "kubernetes",
                        "kubernetes.default",
                        "kubernetes.default.svc",
                        "kubernetes.default.svc.cluster.local",
                    ),
                    "ips": ("127.0.0.1", service_ip),
                }
            cert, key = _leaf(ca_cert, ca_key, cn, orgs, server=server, client=client, **kw)
            self._save(name, cert, key)
        fp_cert, fp_key = self._ca("front-proxy-ca", "workspacespawner-realplane-front-proxy-ca")
        if not self.path("front-proxy-client.crt").exists():
            cert, key = _leaf(fp_cert, fp_key, "front-proxy-client", client=True)
            self._save("front-proxy-client", cert, key)
        if not self.path("sa.key").exists():
            sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            _write(
                self.path("sa.pub"),
                sa.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                ),
            )
            _write(self.path("sa.key"), _key_pem(sa), 0o600)
        return self

    def serving(self, name: str, dns: tuple[str, ...], ips: tuple[str, ...] = ()) -> tuple[Path, Path]:
        """A serving certificate ``<name>.crt``/``.key`` for ``dns``, 127.0.0.1 and ``ips``, signed by the cluster CA;
        made once."""
        crt, key = self.path(f"{name}.crt"), self.path(f"{name}.key")
        if not (crt.exists() and key.exists()):
            ca_cert, ca_key = self._ca("ca", "workspacespawner-realplane-ca")
            cert, k = _leaf(ca_cert, ca_key, dns[0], server=True, dns=dns, ips=("127.0.0.1", *ips))
            self._save(name, cert, k)
        return crt, key

    def client(self, name: str, cn: str, orgs: tuple[str, ...] = ()) -> tuple[Path, Path]:
        """A client certificate ``<name>.crt``/``.key`` for user ``cn`` (groups ``orgs``), signed by the cluster CA; made once."""
        crt, key = self.path(f"{name}.crt"), self.path(f"{name}.key")
        if not (crt.exists() and key.exists()):
            ca_cert, ca_key = self._ca("ca", "workspacespawner-realplane-ca")
            cert, k = _leaf(ca_cert, ca_key, cn, orgs, client=True)
            self._save(name, cert, k)
        return crt, key

    def signer(self, name: str) -> tuple[Path, Path]:
        """A CA of its own ``<name>.crt``/``.key`` (CN ``name``), for a component that signs certificates; made once."""
        self._ca(name, name)
        return self.path(f"{name}.crt"), self.path(f"{name}.key")

    def _ca(self, name: str, cn: str):
        crt, key = self.path(f"{name}.crt"), self.path(f"{name}.key")
        if crt.exists() and key.exists():
            return (
                x509.load_pem_x509_certificate(crt.read_bytes()),
                serialization.load_pem_private_key(key.read_bytes(), None),
            )
        cert, k = _ca(cn)
        self._save(name, cert, k)
        return cert, k

    def _save(self, name: str, cert, key) -> None:
        _write(self.path(f"{name}.key"), _key_pem(key), 0o600)
        _write(self.path(f"{name}.crt"), cert.public_bytes(serialization.Encoding.PEM))
