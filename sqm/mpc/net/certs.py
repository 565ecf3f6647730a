"""TLS identities of a job's parties: what a certificate names, the pinned key fingerprints, and the TLS contexts.

Keys are made by their owners (``sqm keys``, :mod:`sqm.mpc.net.keys`): each organisation makes its own private
key and a certificate signing request naming its party and the job; the authority the organisations chose signs
the request without ever seeing a private key.  Party i's certificate names the party and the job: subject
alternative names ``URI:sqm://<job>/party/<i>`` and ``DNS:party-<i>.<job>.sqm`` (common name ``MPyC party <i>``).
A party's folder (``--ssl-dir``) holds ``mpyc_ca.crt``, ``party_i.crt`` and ``party_i.key``; it refuses its own
private key when others may read it (naming the ``chmod`` that fixes it).

On every connection both ends check the peer's certificate: signed by the job's authority, naming exactly
the party the peer claims (or is expected) to be, and the same job name (:func:`check_peer`).  An insider
holding one party's key therefore cannot act as another party, nor as a party of another job.  The authority
itself could still mint a second certificate for a party; a job file that pins a party's public-key fingerprint
(``"fingerprint": "sha256:<hex>"``, :func:`key_fingerprint`) makes every peer refuse any other key for that
party (:meth:`TLSIdentity.check`), and the party refuse to start with a certificate that does not match its pin.

    python -m sqm.mpc.net.certs --parties 4 --job census-2024 --out certs/

is a DEALER FOR LOCAL TESTING ONLY (tests, benchmarks, the local launcher's per-job keys): it makes an authority
(``mpyc_ca.crt``, and ``authority/mpyc_ca.key``, 0700/0600) and every party's private key on one machine, so whoever
runs it can act as any party.  Organisations that do not trust each other make their keys with ``sqm keys``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import ssl
import sys

from sqm.errors import RefusedError
from sqm.errors import UsageError

CA_CRT, CA_KEY = "mpyc_ca.crt", "mpyc_ca.key"
AUTHORITY_DIR = "authority"  # the CA key's own subfolder: apart from the party keys, never read at run time
DEFAULT_JOB = "sqm"
_JOB_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_URI_RE = re.compile(r"sqm://([^/]+)/party/([0-9]{1,5})")
_PIN_RE = re.compile(r"sha256:[0-9a-fA-F]{64}")


class IdentityError(RefusedError, ValueError):
    """A certificate that does not name the party (or the job) it should."""


def check_job_name(job: str) -> str:
    """A job name usable in a certificate: lowercase letters, digits and inner hyphens, 1-63 characters."""
    if not isinstance(job, str) or not _JOB_RE.fullmatch(job):
        raise UsageError(f"job name {job!r} is not usable in certificates: use 1-63 lowercase letters, digits "
                         f"and inner hyphens (e.g. 'census-2024')")
    return job


def party_files(i: int) -> tuple[str, str]:
    return f"party_{i}.crt", f"party_{i}.key"


def write_file(path: str, data: bytes, private: bool) -> None:
    """Write ``data`` to ``path``: owner-only (0600) when ``private``, else 0644."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    if private:
        os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT


def pem_private_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _validity(days: int):
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)


def not_after(crt) -> datetime.datetime:
    """A certificate's end of validity (UTC, aware), on every supported ``cryptography`` version."""
    end = getattr(crt, "not_valid_after_utc", None)
    return end if end is not None else crt.not_valid_after.replace(tzinfo=datetime.UTC)


def new_authority(name: str, days: int = 365):
    """A fresh certificate authority: (its private key, its self-signed certificate named ``name``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    start, end = _validity(days)
    crt = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
           .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
           .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
           .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
           .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
           .sign(key, hashes.SHA256()))
    return key, crt


def party_subject(job: str, i: int):
    """The subject a certificate of party ``i`` of job ``job`` carries (common name ``MPyC party <i>``)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"MPyC party {i}"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, f"sqm job {job}")])


def party_names(job: str, i: int):
    """The subject alternative names of party ``i`` of job ``job``: exactly these two."""
    from cryptography import x509

    return x509.SubjectAlternativeName([x509.UniformResourceIdentifier(f"sqm://{job}/party/{i}"),
                                        x509.DNSName(f"party-{i}.{job}.sqm")])


def party_certificate(ca_key, ca, public_key, job: str, i: int, days: int = 365):
    """The certificate of party ``i`` of job ``job`` for ``public_key``, signed by the authority (``ca_key``,
    ``ca``): its names and nothing else, no CA flag, client and server authentication; never valid beyond the
    authority's own certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    start, end = _validity(days)
    end = min(end, not_after(ca))
    return (x509.CertificateBuilder().subject_name(party_subject(job, i)).issuer_name(ca.subject)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(party_names(job, i), critical=False)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))


def load_authority(ca_dir: str):
    """(private key, certificate) of the authority in ``ca_dir``: ``mpyc_ca.crt`` and ``authority/mpyc_ca.key``
    (or ``mpyc_ca.key`` beside the certificate, an older layout)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    key_path = os.path.join(ca_dir, AUTHORITY_DIR, CA_KEY)
    if not os.path.isfile(key_path):
        key_path = os.path.join(ca_dir, CA_KEY)
    crt_path = os.path.join(ca_dir, CA_CRT)
    for f in (crt_path, key_path):
        if not os.path.isfile(f):
            raise UsageError(f"{ca_dir} is not an authority's folder: no {os.path.relpath(f, ca_dir)} (make one with "
                             f"sqm keys authority --out DIR)")
    check_private_file(key_path, "the authority's private key")
    with open(key_path, "rb") as fh:
        key = serialization.load_pem_private_key(fh.read(), password=None)
    with open(crt_path, "rb") as fh:
        crt = x509.load_pem_x509_certificate(fh.read())
    return key, crt


def write_authority(out: str, key, crt) -> list[str]:
    """Write an authority into ``out``: ``mpyc_ca.crt`` and, in the owner-only subfolder ``authority/`` (0700),
    its key (0600); returns the files written (relative to ``out``)."""
    from cryptography.hazmat.primitives import serialization

    os.makedirs(os.path.join(out, AUTHORITY_DIR), mode=0o700, exist_ok=True)
    os.chmod(os.path.join(out, AUTHORITY_DIR), 0o700)
    write_file(os.path.join(out, AUTHORITY_DIR, CA_KEY), pem_private_key(key), private=True)
    write_file(os.path.join(out, CA_CRT), crt.public_bytes(serialization.Encoding.PEM), private=False)
    return [CA_CRT, os.path.join(AUTHORITY_DIR, CA_KEY)]


def make_certificates(out: str, n_parties: int, days: int = 365, job: str = DEFAULT_JOB,
                      ca_dir: str | None = None) -> list[str]:
    """A DEALER FOR LOCAL TESTING ONLY (the module docstring): make a CA and every party's key and certificate of
    job ``job`` in ``out``; return the files written.  Organisations make their own keys (:mod:`sqm.mpc.net.keys`).

    ``ca_dir``: sign with the authority already in that folder (``mpyc_ca.crt``, ``mpyc_ca.key``) instead of
    making a new one; the job names keep the jobs apart."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    if n_parties < 2:
        raise UsageError(f"need at least 2 parties, got {n_parties}")
    check_job_name(job)
    os.makedirs(out, mode=0o700, exist_ok=True)  # a new key folder is owner-only
    if ca_dir is not None:
        ca_key, ca = load_authority(ca_dir)
        files = []
        if os.path.abspath(ca_dir) != os.path.abspath(out):
            write_file(os.path.join(out, CA_CRT), ca.public_bytes(serialization.Encoding.PEM), private=False)
            files = [CA_CRT]
    else:
        ca_key, ca = new_authority(f"sqm CA of job {job}", days)
        files = write_authority(out, ca_key, ca)
    for i in range(n_parties):
        key = ec.generate_private_key(ec.SECP256R1())
        crt = party_certificate(ca_key, ca, key.public_key(), job, i, days)
        crt_file, key_file = party_files(i)
        write_file(os.path.join(out, key_file), pem_private_key(key), private=True)
        write_file(os.path.join(out, crt_file), crt.public_bytes(serialization.Encoding.PEM), private=False)
        files += [key_file, crt_file]
    return files


# ----- pinned public keys -------------------------------------------------------------------------------------
def public_key_fingerprint(public_key) -> str:
    """``sha256:<hex>`` of a public key's SubjectPublicKeyInfo (DER): what a job file pins for a party."""
    import hashlib

    from cryptography.hazmat.primitives import serialization

    spki = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def key_fingerprint(crt) -> str:
    """The public-key fingerprint of a certificate: a ``cryptography`` certificate or its DER bytes."""
    from cryptography import x509

    if isinstance(crt, (bytes, bytearray)):
        crt = x509.load_der_x509_certificate(bytes(crt))
    return public_key_fingerprint(crt.public_key())


def check_fingerprint(value, who: str = "a fingerprint") -> str:
    """A pinned fingerprint, ``sha256:`` and 64 hex digits (returned in lowercase); UsageError otherwise."""
    if not isinstance(value, str) or not _PIN_RE.fullmatch(value):
        raise UsageError(f"{who} must be 'sha256:' and 64 hex digits (sqm keys fingerprint FILE.crt prints it), "
                         f"got {printable_value(value)}")
    return value.lower()


def printable_value(value, n: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."


def format_pins(pins: dict[int, str]) -> str:
    """``{1: "sha256:..."}`` as the party option ``--pins`` takes it: ``1=sha256:...,2=sha256:...``."""
    return ",".join(f"{i}={check_fingerprint(pins[i])}" for i in sorted(pins))


def parse_pins(text: str | None) -> dict[int, str]:
    """The ``--pins`` option (:func:`format_pins`) back as ``{party index: fingerprint}``."""
    pins: dict[int, str] = {}
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        index, eq, pin = item.partition("=")
        if not eq or not index.isdigit() or int(index) in pins:
            raise UsageError(f"--pins: {printable_value(item)} is not I=sha256:HEX (each party at most once)")
        pins[int(index)] = check_fingerprint(pin, f"--pins: party {index}'s pin")
    return pins


# ----- reading identities -------------------------------------------------------------------------------------
def _from_names(uris, dns) -> tuple[str, int]:
    """(job, party index) from a certificate's URI and DNS subject alternative names."""
    found = {(m.group(1), int(m.group(2))) for m in (_URI_RE.fullmatch(u) for u in uris) if m}
    if len(found) != 1:
        raise IdentityError("a certificate naming no single sqm party (no 'sqm://<job>/party/<i>' name: not made "
                            "by python -m sqm.mpc.net.certs of this version?)")
    job, index = found.pop()
    if f"party-{index}.{job}.sqm" not in dns:
        raise IdentityError(f"a certificate whose names disagree (URI of party {index} of job {job!r} without "
                            f"the matching DNS name)")
    return job, index


def peer_identity(peercert: dict | None) -> tuple[str, int]:
    """(job, party index) named by a verified peer certificate (``ssl.SSLSocket.getpeercert()`` form)."""
    if not peercert:
        raise IdentityError("no certificate")
    san = peercert.get("subjectAltName", ())
    return _from_names([v for k, v in san if k == "URI"], [v for k, v in san if k == "DNS"])


def file_identity(path: str) -> tuple[str, int]:
    """(job, party index) named by a PEM certificate file."""
    from cryptography import x509

    with open(path, "rb") as f:
        crt = x509.load_pem_x509_certificate(f.read())
    try:
        san = crt.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise IdentityError(f"{path}: a certificate naming no sqm party (no subject alternative names)") from None
    try:
        return _from_names(san.get_values_for_type(x509.UniformResourceIdentifier),
                           san.get_values_for_type(x509.DNSName))
    except IdentityError as e:
        raise IdentityError(f"{path}: {e}") from None


def _party(i: int) -> str:
    return "the server (party 0)" if i == 0 else f"client {i} (party {i})"


def check_peer(peercert: dict | None, pid: int, job: str) -> None:
    """Refuse (IdentityError saying what is wrong) a peer certificate not naming party ``pid`` of ``job``."""
    try:
        their_job, index = peer_identity(peercert)
    except IdentityError as e:
        raise IdentityError(f"{_party(pid)} presented {e}") from None
    if their_job != job:
        raise IdentityError(f"{_party(pid)} presented a certificate of job {their_job!r} (this job is {job!r})")
    if index != pid:
        raise IdentityError(f"{_party(pid)} presented the certificate of {_party(index)}")


class TLSIdentity:
    """Party ``index``'s keys in ``ssl_dir`` (``mpyc_ca.crt``, ``party_<index>.crt``, ``party_<index>.key``).

    Checks that its own certificate names party ``index`` (and ``job`` if given; else the job it names is
    the job this party expects every peer's certificate to name), and that its key matches ``pins[index]`` if
    the job pins one; makes the TLS contexts: TLS 1.3, certificates required both ways, trusting only the job's
    authority (never the system's).  ``pins``: ``{party index: "sha256:<hex>"}``, the public-key fingerprints
    the job file pins (:meth:`check` refuses any other key for a pinned party)."""

    def __init__(self, ssl_dir: str, index: int, job: str | None = None, pins: dict[int, str] | None = None):
        self.dir = os.path.abspath(ssl_dir)
        crt, key = party_files(index)
        need = [CA_CRT, crt, key]
        missing = [n for n in need if not os.path.isfile(os.path.join(self.dir, n))]
        if missing:
            raise IdentityError(f"TLS needs {', '.join(missing)} in {self.dir} (each organisation makes its own key "
                                f"with sqm keys request; see sqm keys --help)")
        self.ca, self.crt, self.key = (os.path.join(self.dir, n) for n in need)
        check_private_file(self.key, "its private key")
        own_job, own = file_identity(self.crt)
        if own != index:
            raise IdentityError(f"{self.crt} is the certificate of {_party(own)}, not of {_party(index)}")
        if job is not None and own_job != job:
            raise IdentityError(f"{self.crt} is a certificate of job {own_job!r}, but this party runs job {job!r} "
                                f"(its key needs a certificate of job {job!r}: sqm keys request --job {job})")
        self.index, self.job = index, own_job
        self.pins = {int(i): check_fingerprint(p) for i, p in (pins or {}).items()}
        if index in self.pins:
            from cryptography import x509

            with open(self.crt, "rb") as f:
                mine = key_fingerprint(x509.load_pem_x509_certificate(f.read()))
            if mine != self.pins[index]:
                raise IdentityError(f"{self.crt} holds the key {mine}, but the job pins {self.pins[index]} for "
                                    f"{_party(index)}: refused to start (use the key whose fingerprint the job file "
                                    f"pins, or have the job file pin this one)")

    def check(self, transport, pid: int) -> None:
        """Refuse (IdentityError) the peer at the other end of ``transport`` (an asyncio TLS transport) unless its
        certificate names party ``pid`` of this job (:func:`check_peer`) and, where the job pins a key for that
        party, holds that key."""
        check_peer(transport.get_extra_info("peercert"), pid, self.job)
        pin = self.pins.get(pid)
        if pin is not None:
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            theirs = key_fingerprint(der) if der else "no certificate"
            if theirs != pin:
                raise IdentityError(f"{_party(pid)} presented a certificate whose key {theirs} is not the key the "
                                    f"job pins for it ({pin})")

    def _context(self, purpose) -> ssl.SSLContext:
        ctx = ssl.SSLContext(purpose)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(self.crt, self.key)
        ctx.load_verify_locations(cafile=self.ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def server_context(self) -> ssl.SSLContext:
        return self._context(ssl.PROTOCOL_TLS_SERVER)

    def client_context(self) -> ssl.SSLContext:
        ctx = self._context(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False  # the peer's party and job are checked by check_peer, naming what differs
        return ctx


def check_private_file(path: str, what: str) -> None:
    """IdentityError when ``path`` (a private key) may be read or written by anyone but its owner (POSIX modes),
    naming the fix."""
    if os.name != "posix":
        return
    mode = os.stat(path).st_mode & 0o777
    if mode & 0o077:
        raise IdentityError(f"{path} ({what}) is readable or writable by others (mode {mode:04o}): refused; "
                            f"run chmod 600 {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sqm.mpc.net.certs",
                                 description="A DEALER FOR LOCAL TESTING ONLY: an authority and every party's "
                                             "private key, made on this one machine (whoever runs it can act as "
                                             "any party).  Organisations make their own keys with sqm keys.")
    ap.add_argument("--parties", type=int, required=True, help="number of parties M (server + clients)")
    ap.add_argument("--out", required=True, help="folder to write the CA and the parties' keys into")
    ap.add_argument("--job", default=DEFAULT_JOB,
                    help=f"the job's name, written into every certificate (default {DEFAULT_JOB!r}); a party "
                         f"refuses peers whose certificate names another job")
    ap.add_argument("--days", type=int, default=365, help="certificate validity in days (default 365)")
    ap.add_argument("--ca", metavar="DIR", help="sign with the authority in DIR (mpyc_ca.crt, and mpyc_ca.key "
                                                "in DIR/authority or DIR) "
                                                "instead of making a new one")
    args = ap.parse_args(argv)
    try:
        files = make_certificates(args.out, args.parties, args.days, args.job, args.ca)
    except (ValueError, OSError) as e:
        print(f"sqm.mpc.net.certs: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(files)} files for job {args.job!r} to {args.out} (local testing only: this machine made "
          f"every party's private key; organisations make their own with sqm keys)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
