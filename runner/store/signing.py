"""Signed store entries: "verified" is an Ed25519 signature by a worker's key, never a field a file can claim.

A worker holds a private key; the leaderboard and ``knowgic store list`` hold the matching public keys in a
*trusted keys* file. Keys are OpenSSH Ed25519 keys, so ``ssh-keygen -t ed25519`` makes them as well as
``knowgic store keygen`` does, and a trusted keys file reads like ``authorized_keys``::

    worker (holds the private key)                       reader (holds public keys only)
    entry record (results sha256, job id = entry id,     entry record from STORE/entries/
      submission sha256, manifest, job, date)              minus "signature" -> the same message
    message = PREFIX + canonical JSON of the record      public key whose fingerprint is signature.key
    signature = Ed25519(private key, message)            Ed25519 verify -> "verified"; otherwise "local"
    record["signature"] = {algorithm, key, value}        (with the reason: unsigned, unknown key, ...)

The message is the whole entry record without its ``signature`` (sorted keys, no whitespace), so editing any
byte a reader shows (results hash, job, submission archive hash, manifest, date) breaks the signature.
Entry and signature are declared in ``spec/schemas/store_entry.schema.json``.

Defaults are defined here once: the private key at ``$KNOWGIC_SIGNING_KEY``, else
``$XDG_CONFIG_HOME/knowgic/signing-key`` (``~/.config/knowgic/signing-key``); the trusted keys at
``$KNOWGIC_TRUSTED_KEYS``, else ``$XDG_CONFIG_HOME/knowgic/trusted-keys``. Neither lives in the store
folder: whoever can write the store must not be able to add a key that it trusts.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowgic.errors import KnowgicError
from knowgic.runner.options import config_dir

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SIGNING_KEY_ENV = "KNOWGIC_SIGNING_KEY"
TRUSTED_KEYS_ENV = "KNOWGIC_TRUSTED_KEYS"
ALGORITHM = "ed25519"
MESSAGE_PREFIX = b"knowgic-store-entry-v1\n"  # domain separation: this key signs nothing else
_SSH_TYPE = "ssh-ed25519"


def default_signing_key_path() -> Path:
    """``$KNOWGIC_SIGNING_KEY``, else ``$XDG_CONFIG_HOME/knowgic/signing-key``."""
    return Path(os.environ.get(SIGNING_KEY_ENV) or config_dir() / "signing-key")


def default_trusted_keys_path() -> Path:
    """``$KNOWGIC_TRUSTED_KEYS``, else ``$XDG_CONFIG_HOME/knowgic/trusted-keys``."""
    return Path(os.environ.get(TRUSTED_KEYS_ENV) or config_dir() / "trusted-keys")


def add_signing_key_option(parser: argparse.ArgumentParser) -> None:
    """``--signing-key PATH`` (a worker's private key); its default is :func:`default_signing_key_path`."""
    parser.add_argument(
        "--signing-key",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"private key this worker signs stored runs with (default: ${SIGNING_KEY_ENV}, else "
        "~/.config/knowgic/signing-key; create one with `knowgic store keygen`)",
    )


def add_trusted_keys_option(parser: argparse.ArgumentParser) -> None:
    """``--trusted-keys FILE`` (public keys of the workers); its default is
    :func:`default_trusted_keys_path`."""
    parser.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        metavar="FILE",
        help="public keys (one 'ssh-ed25519 KEY comment' line each) whose signatures make a run verified; "
        f"other runs are shown as local (default: ${TRUSTED_KEYS_ENV}, else ~/.config/knowgic/trusted-keys)",
    )


def _serialization() -> Any:
    # Imported when keys are used, not when a parser is built (cryptography is in the runner and
    # leaderboard extras; a missing extra is named by the command line).
    from cryptography.hazmat.primitives import serialization

    return serialization


def entry_message(record: Mapping[str, Any]) -> bytes:
    """The bytes a worker signs: the entry record without ``signature``, as canonical JSON."""
    body = {k: v for k, v in record.items() if k != "signature"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return MESSAGE_PREFIX + canonical.encode("utf-8")


def _public_line(key: Ed25519PublicKey) -> str:
    serialization = _serialization()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def fingerprint(key: Ed25519PublicKey) -> str:
    """``SHA256:…`` as ``ssh-keygen -l`` prints it (sha256 of the key's wire blob, base64 unpadded)."""
    blob = base64.b64decode(_public_line(key).split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class Signer:
    """A worker's private key (read from a file that only workers can read)."""

    key: Ed25519PrivateKey
    path: Path

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key.public_key())

    @property
    def public_line(self) -> str:
        return _public_line(self.key.public_key())

    def sign(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """``record`` with its ``signature``: algorithm, key fingerprint and the base64 Ed25519 signature."""
        signature = self.key.sign(entry_message(record))
        return {
            **{k: v for k, v in record.items() if k != "signature"},
            "signature": {
                "algorithm": ALGORITHM,
                "key": self.fingerprint,
                "value": base64.b64encode(signature).decode(),
            },
        }


def load_signer(path: Path | None = None) -> Signer:
    """The private key at ``path`` (default :func:`default_signing_key_path`); one line when it cannot."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    serialization = _serialization()
    path = Path(path) if path is not None else default_signing_key_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise KnowgicError(
            f"no signing key at {path}: a worker signs what it stores; create one with `knowgic store "
            f"keygen` (or set ${SIGNING_KEY_ENV} / --signing-key)"
        ) from None
    except OSError as exc:
        raise KnowgicError(f"cannot read the signing key {path}: {exc.strerror or exc}") from None
    try:
        if data.lstrip().startswith(b"-----BEGIN OPENSSH"):
            key = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KnowgicError(
            f"{path} is not an unencrypted OpenSSH or PEM private key: {exc}".rstrip(": ")
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KnowgicError(f"{path} holds a {type(key).__name__}; store entries are signed with Ed25519 keys")
    return Signer(key=key, path=path)


def generate_key(path: Path, comment: str | None = None) -> Signer:
    """Write a new Ed25519 private key to ``path`` (mode 0600, never over an existing file) and its public
    line to ``path.pub``; return the signer."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    serialization = _serialization()
    key = Ed25519PrivateKey.generate()
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise KnowgicError(
            f"{path} exists; a signing key is never overwritten (choose another path)"
        ) from None
    except OSError as exc:
        raise KnowgicError(f"cannot write the signing key {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    signer = Signer(key=key, path=path)
    comment = comment or f"knowgic-worker@{socket.gethostname()}"
    Path(f"{path}.pub").write_text(f"{signer.public_line} {comment}\n", encoding="utf-8")
    return signer


@dataclass(frozen=True)
class TrustedKey:
    key: Ed25519PublicKey
    fingerprint: str
    comment: str


def parse_public_line(line: str, where: str) -> TrustedKey:
    """One ``ssh-ed25519 BASE64 [comment]`` line; raises :class:`KnowgicError` naming ``where``."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    serialization = _serialization()
    parts = line.split(None, 2)
    if len(parts) < 2 or parts[0] != _SSH_TYPE:
        raise KnowgicError(f"{where}: expected 'ssh-ed25519 BASE64 [comment]', found {line[:60]!r}")
    try:
        key = serialization.load_ssh_public_key(f"{parts[0]} {parts[1]}".encode())
    except (ValueError, TypeError) as exc:
        raise KnowgicError(f"{where}: not a valid ssh-ed25519 public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):  # pragma: no cover - the type prefix was checked
        raise KnowgicError(f"{where}: not an Ed25519 key")
    return TrustedKey(
        key=key, fingerprint=fingerprint(key), comment=parts[2].strip() if len(parts) > 2 else ""
    )


@dataclass(frozen=True)
class TrustedKeys:
    """The public keys whose signatures make an entry "verified" (by fingerprint)."""

    keys: Mapping[str, TrustedKey]
    path: Path | None = None

    @classmethod
    def none(cls) -> TrustedKeys:
        return cls(keys={})

    @classmethod
    def load(cls, path: Path | None = None, *, required: bool = False) -> TrustedKeys:
        """The keys in ``path`` (default :func:`default_trusted_keys_path`): one public key per line,
        ``#`` comments. A missing default file trusts nobody; a missing file that was named is an error."""
        named = path is not None
        path = Path(path) if named else default_trusted_keys_path()
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            if named or required:
                raise KnowgicError(f"trusted keys file {path} does not exist") from None
            return cls(keys={}, path=path)
        except (OSError, UnicodeDecodeError) as exc:
            raise KnowgicError(f"cannot read the trusted keys file {path}: {exc}") from None
        keys: dict[str, TrustedKey] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if line and not line.startswith("#"):
                trusted = parse_public_line(line, f"{path}:{number}")
                keys[trusted.fingerprint] = trusted
        return cls(keys=keys, path=path)

    def check(self, record: Mapping[str, Any]) -> str | None:
        """None when ``record`` carries a valid signature by a trusted key, else why it is not verified."""
        from cryptography.exceptions import InvalidSignature

        signature = record.get("signature")
        if signature is None:
            return "it carries no signature"
        if not isinstance(signature, Mapping) or signature.get("algorithm") != ALGORITHM:
            return "its signature is not an ed25519 signature object"
        trusted = self.keys.get(str(signature.get("key")))
        if trusted is None:
            return f"it is signed by a key this reader does not trust ({str(signature.get('key'))[:60]})"
        try:
            raw = base64.b64decode(str(signature.get("value")), validate=True)
            message = entry_message(record)
        except ValueError:
            return "its signature value is not base64, or the entry holds values JSON cannot carry"
        try:
            trusted.key.verify(raw, message)
        except InvalidSignature:
            return f"its signature by {trusted.fingerprint} does not match the entry (edited after signing?)"
        return None

    def describe(self, key_fingerprint: str) -> str:
        trusted = self.keys.get(key_fingerprint)
        comment = f" ({trusted.comment})" if trusted and trusted.comment else ""
        return f"{key_fingerprint}{comment}"
