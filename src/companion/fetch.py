"""``companion fetch SLUG``: download a paper's public weights and data into ``data/local/<slug>/``.

The one command of the companion that touches the network. Each paper package that used public
weights or data lists them as :class:`Source` records in ``SOURCES``; Hugging Face repositories go
through ``huggingface_hub.snapshot_download`` at the revision the source pins (resumable, with a
progress bar, checking each file against the hub's published size and hash); a plain URL is
downloaded with HTTP range requests (resumable) and checked against its published SHA-256. What is
already there is not fetched again: a hub source whose folder holds every file of the pinned
revision at the size it was fetched with (``.companion-fetch.json`` records them), a URL whose file
is there with the published SHA-256. Offline, or when a source cannot be reached, the command stops
with one line (exit 2), never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from companion import registry

MANIFEST = ".companion-fetch.json"

class FetchError(RuntimeError):
    """A source that cannot be fetched: offline, unreachable, gated, or failing its check."""


@dataclass(frozen=True)
class Source:
    """One public artefact a paper's ``paper`` preset reads, and where it goes under data/local/<slug>/."""

    target: str
    what: str
    licence: str
    repo_id: str = ""
    repo_type: str = "model"
    allow: tuple[str, ...] = ()
    url: str = ""
    sha256: str = ""
    revision: str = ""  # a hub source's commit hash or tag: every fetch then gets the same files


def sources(slug: str) -> tuple[Source, ...]:
    """The declared sources of ``slug`` (empty when its paper used no public weights or data)."""
    return tuple(getattr(registry.get(slug).module(), "SOURCES", ()))


def _hub(source: Source, dest: Path) -> None:
    """Download a hub repository at its pinned revision, unless the last fetch of it is all there."""
    fetched = {"repo_id": source.repo_id, "revision": source.revision, "allow": list(source.allow)}
    if _fetched_before(dest, fetched):
        print(f"  already present at revision {source.revision}")
        return
    from huggingface_hub import snapshot_download

    snapshot_download(source.repo_id, repo_type=source.repo_type, revision=source.revision, local_dir=dest,
                      allow_patterns=list(source.allow) or None)
    files = {str(f.relative_to(dest)): f.stat().st_size for f in sorted(dest.rglob("*"))
             if f.is_file() and f.name != MANIFEST and ".cache" not in f.relative_to(dest).parts}
    tmp = dest / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps({**fetched, "files": files}, indent=1) + "\n")
    os.replace(tmp, dest / MANIFEST)


def _fetched_before(dest: Path, fetched: dict) -> bool:
    """Whether ``dest`` holds every file of a fetch like ``fetched``, each at the size it had then."""
    try:
        manifest = json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or {k: manifest.get(k) for k in fetched} != fetched:
        return False
    files = manifest.get("files") or {}
    return bool(files) and all((dest / name).is_file() and (dest / name).stat().st_size == size
                               for name, size in files.items())


def _sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            h.update(block)
    return h.hexdigest()


def _url(source: Source, dest: Path) -> None:
    """Resumable download of one file with a SHA-256 check, unless it is there with that SHA-256."""
    from tqdm import tqdm

    dest.mkdir(parents=True, exist_ok=True)
    final = dest / source.url.rsplit("/", 1)[-1]
    if final.is_file() and (not source.sha256 or _sha256(final) == source.sha256):
        print(f"  {final.name} already present")
        return
    partial = final.with_name(final.name + ".partial")
    done = partial.stat().st_size if partial.exists() else 0
    request = urllib.request.Request(source.url, headers={"Range": f"bytes={done}-"} if done else {})
    with urllib.request.urlopen(request, timeout=30) as response, partial.open("ab" if done else "wb") as out:
        total = int(response.headers.get("Content-Length", 0)) + done
        with tqdm(total=total, initial=done, unit="B", unit_scale=True, desc=final.name) as bar:
            for block in iter(lambda: response.read(2**20), b""):
                out.write(block)
                bar.update(len(block))
    if source.sha256:
        got = _sha256(partial)
        if got != source.sha256:
            partial.unlink()
            raise FetchError(f"{final.name}: SHA-256 {got[:12]}... is not the published "
                             f"{source.sha256[:12]}...; the partial file was removed, run fetch again")
    shutil.move(partial, final)


def fetch(slug: str, root: Path | None = None) -> list[Path]:
    """Download every source of ``slug``; return the folders written. Raises :class:`FetchError`."""
    root = root or registry.project_root()
    found = sources(slug)
    if not found:
        raise FetchError(f"{slug} has nothing to fetch: its paper used no public weights or data we can "
                         "download (see data/README.md and `companion params " + slug + "`)")
    unpinned = next((s for s in found if s.repo_id and not s.revision), None)
    if unpinned is not None:
        raise FetchError(f"cannot fetch {unpinned.repo_id} for {slug}: its Source pins no revision; declare "
                         "revision=<commit hash or tag> in the paper's SOURCES, so that every fetch gets the "
                         "same files")
    written = []
    for source in found:
        dest = root / "data" / "local" / slug / source.target
        print(f"{slug}: {source.what} -> {dest.relative_to(root)} ({source.licence})")
        try:
            (_hub if source.repo_id else _url)(source, dest)
        except FetchError:
            raise
        except Exception as err:  # offline, DNS, HTTP, gated repository: one line, no traceback
            where = source.repo_id or source.url
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise FetchError(f"cannot fetch {where} for {slug}: {reason[:200]} (offline? the rest of the "
                             "companion needs no network)") from None
        written.append(dest)
    return written
