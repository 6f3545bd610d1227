"""Sealing: text a training session keeps from the trainee (the hidden fault, the ground truth).

Not secrecy against root on the same machine, which can read the key; the point is that
`cat state.json` or a grep of the lab directory does not give the answer away. A SHAKE-256
keystream (stdlib only) with an HMAC tag, so a damaged or foreign blob is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path

from .errors import TwinError

KEY_FILE = "training.key"
NONCE, TAG = 16, 16


def new_key(directory: Path) -> bytes:
    key = os.urandom(32)
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


def _stream(key: bytes, nonce: bytes, size: int) -> int:
    return int.from_bytes(hashlib.shake_256(key + nonce).digest(size), "big")


def seal(key: bytes, text: str) -> str:
    data = text.encode()
    nonce = os.urandom(NONCE)
    body = (int.from_bytes(data, "big") ^ _stream(key, nonce, len(data))).to_bytes(len(data), "big")
    tag = hmac.new(key, nonce + body, "sha256").digest()[:TAG]
    return base64.b64encode(nonce + tag + body).decode()


def unseal(key: bytes, blob: str) -> str:
    raw = base64.b64decode(blob)
    nonce, tag, body = raw[:NONCE], raw[NONCE:NONCE + TAG], raw[NONCE + TAG:]
    if not hmac.compare_digest(tag, hmac.new(key, nonce + body, "sha256").digest()[:TAG]):
        raise TwinError("a sealed record does not match the session's key", hint="the file was changed")
    return (int.from_bytes(body, "big") ^ _stream(key, nonce, len(body))).to_bytes(len(body), "big").decode()
