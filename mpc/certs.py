"""TLS keys and certificates for MPyC parties (``--ssl``), made with the ``openssl`` command.

    python -m mpc.certs --parties 4 --out certs/

writes a certificate authority (``mpyc_ca.crt``, ``mpyc_ca.key``) and, for each party i, ``party_i.key`` and
``party_i.crt`` signed by it with the common name MPyC checks (``MPyC party i``).  Give party i only
``mpyc_ca.crt``, ``party_i.crt`` and ``party_i.key`` (keep ``mpyc_ca.key`` offline), and start it with
``--ssl --ssl-dir DIR`` where DIR holds those three files.  Every connection is then mutually
authenticated: a party accepts only peers holding a certificate from the same authority.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys


def _openssl(*args: str, cwd: str) -> None:
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make certificates (install OpenSSL)")
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {res.stderr.strip()}")


def make_certificates(out: str, n_parties: int, days: int = 365) -> list[str]:
    """Make a CA and one key/certificate pair per party in ``out``; return the files written."""
    if n_parties < 2:
        raise ValueError(f"need at least 2 parties, got {n_parties}")
    os.makedirs(out, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days), "-subj", "/CN=MPyC CA",
             "-keyout", "mpyc_ca.key", "-out", "mpyc_ca.crt", cwd=out)
    files = ["mpyc_ca.crt", "mpyc_ca.key"]
    for i in range(n_parties):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=MPyC party {i}",
                 "-keyout", f"party_{i}.key", "-out", f"party_{i}.csr", cwd=out)
        with open(os.path.join(out, f"party_{i}.ext"), "w") as f:
            f.write(f"subjectAltName=DNS:MPyC party {i}\n")
        _openssl("x509", "-req", "-in", f"party_{i}.csr", "-CA", "mpyc_ca.crt", "-CAkey", "mpyc_ca.key",
                 "-CAcreateserial", "-days", str(days), "-extfile", f"party_{i}.ext", "-out", f"party_{i}.crt",
                 cwd=out)
        for tmp in (f"party_{i}.csr", f"party_{i}.ext"):
            os.remove(os.path.join(out, tmp))
        files += [f"party_{i}.key", f"party_{i}.crt"]
    for name in files:
        if name.endswith(".key"):
            os.chmod(os.path.join(out, name), 0o600)
    return files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mpc.certs", description=__doc__.splitlines()[0])
    ap.add_argument("--parties", type=int, required=True, help="number of parties M (server + clients)")
    ap.add_argument("--out", required=True, help="folder to write the CA and the parties' keys into")
    ap.add_argument("--days", type=int, default=365, help="certificate validity in days (default 365)")
    args = ap.parse_args(argv)
    try:
        files = make_certificates(args.out, args.parties, args.days)
    except (ValueError, RuntimeError) as e:
        print(f"mpc.certs: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(files)} files to {args.out}: give party i mpyc_ca.crt, party_i.crt and party_i.key only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
