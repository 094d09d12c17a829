"""An artifact as a user names it -> the committed ``Artifact``, for every front end that takes one.

Accepted, i.e. every form ``compass artifacts ls|show`` prints or a file browser shows:

- a URI: ``file:///…/KIND/NAME/VERSION`` or ``s3://bucket/prefix/KIND/NAME/VERSION``;
- a local path: the version folder (the one holding ``manifest.json``), the payload folder inside
  it (``…/VERSION/data-…``, what a stage hands to transformers) or the manifest itself;
- ``KIND/NAME`` (its LATEST version) or ``KIND/NAME/VERSION`` (a unique version prefix is enough) in
  the given store.

Errors are ``ArtifactNotFound`` with one line that names the reference and the store looked in.
"""
from __future__ import annotations

import os

from compass.store.layout import ArtifactNotFound
from compass.store.store import Artifact, ArtifactStore

MANIFEST = "manifest.json"
FORMS = "expected a URI, KIND/NAME or KIND/NAME/VERSION, or an artifact's folder"


def _version_dir(path: str) -> str | None:
    """The version folder ``path`` is, or lies in (payload folder, manifest file), else None."""
    p = os.path.abspath(path)
    if os.path.isfile(p) and os.path.basename(p) == MANIFEST:
        return os.path.dirname(p)
    for d in (p, os.path.dirname(p)):
        if os.path.isfile(os.path.join(d, MANIFEST)):
            return d
    return None


def _by_name(ref: str, store: ArtifactStore) -> Artifact:
    parts = ref.strip("/").split("/")
    kind, name = parts[0], parts[1]
    version = parts[2] if len(parts) == 3 else "latest"
    try:
        return store.get(kind, name, version)
    except ArtifactNotFound as e:
        err = e
        versions = [m.version for m in store.list(kind, name)]
        if version == "latest":
            if versions:
                raise ArtifactNotFound(f"{store.root}/{kind}/{name}: no 'latest' alias; committed versions: "
                                       f"{', '.join(versions)}") from None
            raise ArtifactNotFound(f"no committed artifact {kind}/{name} in {store.root}") from None
        matches = [v for v in versions if v.startswith(version)]
        if len(matches) == 1:
            return store.get(kind, name, matches[0])
        if len(matches) > 1:
            raise ArtifactNotFound(f"{kind}/{name}/{version}: ambiguous version prefix "
                                   f"({', '.join(matches)})") from None
        raise err from None


def open_ref(ref: str, store: ArtifactStore) -> Artifact:
    """The committed artifact ``ref`` names (see the module doc); ``store`` resolves KIND/NAME forms."""
    t = ref.strip()
    if not t:
        raise ArtifactNotFound(f"empty artifact reference: {FORMS}")
    if "://" in t and not t.startswith("file://"):
        parts = t.rstrip("/").split("://", 1)[1].split("/")
        if len(parts) < 4 or not all(parts[-3:]):
            raise ArtifactNotFound(f"{t}: not an artifact URI (expected ROOT/KIND/NAME/VERSION)")
        return Artifact.open_uri(t.rstrip("/"), store)
    path = t[len("file://"):] if t.startswith("file://") else t
    if os.path.exists(path):
        vdir = _version_dir(path)
        if vdir is None:
            versions = sorted(e.name for e in os.scandir(path) if e.is_dir() and
                              os.path.isfile(os.path.join(e.path, MANIFEST))) if os.path.isdir(path) else []
            if versions:      # an artifact's name folder: one of its versions was meant
                raise ArtifactNotFound(f"{t}: lacks the VERSION (committed: {', '.join(versions[-5:])}); "
                                       f"{FORMS}")
            raise ArtifactNotFound(f"{t}: not an artifact (no {MANIFEST} in it or in its parent folder); "
                                   f"{FORMS}")
        if len(vdir.strip("/").split("/")) < 4:
            raise ArtifactNotFound(f"{t}: an artifact folder must be ROOT/KIND/NAME/VERSION")
        return Artifact.open_uri(vdir, store if store.is_local else None)
    parts = t.strip("/").split("/")
    if not t.startswith(("/", ".", "file://")) and len(parts) in (2, 3) and all(parts):
        return _by_name(t, store)
    if t.startswith(("/", "file://")) and len(path.strip("/").split("/")) >= 4:
        return Artifact.open_uri(os.path.abspath(path), store if store.is_local else None)  # says what is missing
    raise ArtifactNotFound(f"{t}: no such file or folder, and not KIND/NAME[/VERSION] in {store.root}; "
                           f"{FORMS}")
