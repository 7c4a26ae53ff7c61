"""An offline English byte corpus: the docstrings of standard-library modules.

Deterministic for a fixed Python version (record ``sys.version`` next to results). Characters
outside Latin-1 are dropped so that every byte is one token of a 256-symbol vocabulary.
"""

from __future__ import annotations

import importlib
import inspect
from functools import lru_cache

import numpy as np

MODULES = (
    "abc", "argparse", "array", "ast", "asyncio", "base64", "bisect", "bz2", "calendar", "cmath",
    "codecs", "collections", "colorsys", "configparser", "contextlib", "copy", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "dis", "email", "enum", "filecmp", "fnmatch", "fractions",
    "ftplib", "functools", "getopt", "gettext", "glob", "gzip", "hashlib", "heapq", "hmac", "html",
    "http.client", "imaplib", "inspect", "io", "ipaddress", "itertools", "json", "locale", "logging",
    "lzma", "mailbox", "math", "mimetypes", "numbers", "operator", "optparse", "os", "pathlib",
    "pickle", "pkgutil", "platform", "plistlib", "poplib", "pprint", "queue", "random", "re",
    "sched", "secrets", "selectors", "shelve", "shlex", "shutil", "signal", "smtplib", "socket",
    "sqlite3", "ssl", "statistics", "string", "struct", "subprocess", "tarfile", "tempfile",
    "textwrap", "threading", "timeit", "tokenize", "trace", "traceback", "typing", "unittest",
    "urllib.parse", "urllib.request", "uuid", "wave", "weakref", "xml.dom.minidom", "zipfile",
)


def _docs_of(obj: object, depth: int = 0) -> list[str]:
    """The docstring of ``obj`` and of its public members (classes: one level further)."""
    out = [inspect.getdoc(obj) or ""]
    if depth > 1:
        return out
    for name in sorted(vars(obj)) if hasattr(obj, "__dict__") else []:
        if name.startswith("_"):
            continue
        member = getattr(obj, name, None)
        if inspect.ismodule(member):
            continue
        if inspect.isclass(member):
            out += _docs_of(member, depth + 1)
        elif callable(member):
            out.append(inspect.getdoc(member) or "")
    return out


@lru_cache(maxsize=1)
def corpus_bytes() -> bytes:
    """All de-duplicated docstrings of :data:`MODULES`, joined by blank lines, as Latin-1 bytes."""
    seen: dict[str, None] = {}
    for mod_name in MODULES:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        for doc in _docs_of(mod):
            if doc.strip():
                seen.setdefault(doc.strip(), None)
    text = "\n\n".join(seen)
    return text.encode("latin-1", errors="ignore")


def split_tokens(holdout: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """The corpus as int64 byte ids, split into (train, held-out last ``holdout`` fraction)."""
    data = np.frombuffer(corpus_bytes(), dtype=np.uint8).astype(np.int64)
    cut = int(len(data) * (1 - holdout))
    return data[:cut], data[cut:]


def sample_windows(data: np.ndarray, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` random windows of ``length`` consecutive tokens, shape (n, length)."""
    starts = rng.integers(0, len(data) - length, size=n)
    return np.stack([data[s:s + length] for s in starts])


def tiled_windows(data: np.ndarray, n: int, length: int) -> np.ndarray:
    """``n`` evenly spaced windows of ``length`` tokens (deterministic), shape (n, length)."""
    starts = np.linspace(0, len(data) - length - 1, n).astype(int)
    return np.stack([data[s:s + length] for s in starts])
