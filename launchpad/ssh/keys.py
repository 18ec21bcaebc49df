"""SSH keys: generate ed25519 key pairs (0600, never logged), load private keys, fingerprint keys.

Private keys never leave this machine: only the public line (``ssh-ed25519 AAAA... comment``) is ever
shown or sent anywhere.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path

from ..errors import AuthError, ConfigError


def fingerprint(key_blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob: ``SHA256:base64-without-padding``."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key_blob).digest()).decode().rstrip("=")


def generate_ed25519(path: str | os.PathLike, comment: str = "launchpad") -> str:
    """Write a new ed25519 private key to `path` (mode 0600, OpenSSH format, unencrypted) and its public
    line to `path`.pub (0644). Refuses to overwrite an existing file. Returns the public line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    line = f"{public.decode()} {comment}".strip()
    # O_EXCL + mode at creation: the private key is never readable by others, not even for a moment.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    pub = Path(f"{path}.pub")
    tmp = Path(f"{path}.pub.tmp")
    tmp.write_text(line + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, pub)
    return line


def ensure_keypair(path: str | os.PathLike, comment: str = "launchpad") -> str:
    """The public line of the key at `path`, generating an ed25519 pair there first if none exists."""
    path = Path(path)
    if not path.exists():
        try:
            return generate_ed25519(path, comment)
        except FileExistsError:  # another process made it first: use theirs
            pass
    return public_line(path)


def public_line(path: str | os.PathLike) -> str:
    """``<type> <base64> [comment]`` of the private key at `path` (from `path`.pub when present)."""
    pub = Path(f"{path}.pub")
    if pub.exists():
        return pub.read_text().strip()
    key = load_private_key(path)
    return f"{key.get_name()} {key.get_base64()}"


def load_private_key(path: str | os.PathLike):
    """A paramiko PKey from an OpenSSH/PEM private key file. Raises ConfigError (missing/unreadable/not a
    key) or AuthError (encrypted: launchpad does not prompt; load it into ssh-agent instead)."""
    import paramiko

    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"ssh key {path} does not exist",
                          hint="fix `key:` in hosts.yaml, or leave it out to use launchpad's own key")
    try:
        return paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException:
        raise AuthError(f"ssh key {path} is encrypted",
                        hint="add it to ssh-agent (`ssh-add`); launchpad never asks for passphrases") from None
    except PermissionError:
        raise ConfigError(f"ssh key {path} is not readable (permission denied)") from None
    except (paramiko.SSHException, ValueError, UnicodeDecodeError) as e:
        # never echo the file's content: the message names the file and paramiko's reason only
        raise ConfigError(f"ssh key {path} is not a private key paramiko can read ({type(e).__name__})") from None


def parse_public_key(text: str):
    """A paramiko PKey from ``<type> <base64> [comment]`` (a host key pinned in hosts.yaml). Raises ValueError."""
    import paramiko

    parts = text.split()
    if len(parts) < 2:
        raise ValueError("must be '<type> <base64>', e.g. 'ssh-ed25519 AAAAC3Nza...'")
    kind, data = parts[0], parts[1]
    try:
        blob = base64.b64decode(data, validate=True)
    except (ValueError, binascii.Error):
        raise ValueError("the key part is not valid base64") from None
    try:
        key = paramiko.PKey.from_type_string(kind, blob)
    except (paramiko.SSHException, ValueError, TypeError) as e:
        raise ValueError(f"not a {kind} public key paramiko understands ({e})") from None
    return key
