"""The locked environment: the lock file `make install` installs, and its hash for provenance."""

from __future__ import annotations

import hashlib
from pathlib import Path

LOCK_FILE = "requirements/lock-cpu.txt"


def lock_hash(root: Path) -> str | None:
    """The sha256 (hex) of the lock file in project folder ``root``; None when there is none."""
    try:
        return hashlib.sha256((Path(root) / LOCK_FILE).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None
