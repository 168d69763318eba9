"""Pushing a local image with zstd layers, through skopeo: Docker 20.10 pushes only gzip and has no buildx, and a
zstd layer is smaller and unpacks faster on engines that take it (Docker 23.0+, containerd 1.5+, podman, CRI-O).
Docker 20.10 cannot pull a zstd image: gzip stays the default, and the push says which it used."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from imagegen.engine.registry.http import RegistryClient, RegistryError, is_loopback


def require_skopeo() -> None:
    """Before anything is asked of the engine or the registry."""
    if shutil.which("skopeo") is None:
        raise RegistryError("--compression zstd pushes through skopeo, which is not installed: apt-get install "
                            "skopeo (Debian/Ubuntu), or push with the default --compression gzip")


def copy_as_zstd(image_id: str, remote: RegistryClient, repository: str, tag: str) -> str:
    """Copies the engine's image to REGISTRY/REPOSITORY:TAG with every layer compressed as zstd; its digest.
    zstd layers need an OCI manifest, so skopeo writes the config in OCI's format: its digest is not the local
    image id (the layers' content, diff_ids, and the labels are the same), and a later push recognises the
    published image by its inputs label."""
    require_skopeo()
    target = f"{remote.host}/{remote.path(repository)}:{tag}"
    command = ["skopeo", "copy", "--quiet", "--dest-compress-format", "zstd", "--dest-compress-level", "3",
               f"docker-daemon:{image_id}", f"docker://{target}"]
    if is_loopback(remote.host):
        command[2:2] = ["--dest-tls-verify=false"]  # plain HTTP, as the docker engine speaks to loopback
    with tempfile.TemporaryDirectory(prefix="imagegen-skopeo-") as private:
        if remote.credentials:  # in a private folder, never on a command line that `ps` shows
            authfile = Path(private) / "auth.json"
            token = base64.b64encode(f"{remote.credentials.username}:{remote.credentials.password}".encode())
            authfile.write_text(json.dumps({"auths": {remote.host: {"auth": token.decode()}}}))
            command[2:2] = ["--dest-authfile", str(authfile)]
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        detail = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        raise RegistryError(f"push of {target} (zstd, through skopeo) failed: {detail}")
    found = remote.manifest(repository, tag, "HEAD")
    if found is None:
        raise RegistryError(f"push of {target} (zstd) reported success but the registry does not list it")
    return found.digest
