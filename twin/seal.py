"""Sealing: text a training session keeps from the trainee (the hidden fault, the ground truth).

Not secrecy against root on the same machine, which can read the key; the point is that
`cat state.json` or a grep of the lab directory does not give the answer away. Fernet
(`cryptography`: AES-CBC with an HMAC tag), so a damaged or foreign blob is refused.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from twin.errors import TwinError

KEY_FILE = "training.key"


def new_key(directory: Path) -> bytes:
    key = Fernet.generate_key()
    path = directory / KEY_FILE
    path.touch(mode=0o600)
    path.write_bytes(key)
    return key


def key_of(directory: Path) -> bytes:
    try:
        return (directory / KEY_FILE).read_bytes()
    except FileNotFoundError:
        raise TwinError(f"no training key in {directory}", hint="the session's files are damaged: "
                        "`twin train stop` tears the lab down") from None


def seal(key: bytes, text: str) -> str:
    return Fernet(key).encrypt(text.encode()).decode()


def unseal(key: bytes, blob: str) -> str:
    try:
        return Fernet(key).decrypt(blob.encode()).decode()
    except (InvalidToken, ValueError):
        raise TwinError("a sealed record does not match the session's key", hint="the file was changed") from None
