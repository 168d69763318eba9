"""The registry edge: its HTTP API (http: credentials, the client, manifests, tag digests) and OCI plumbing on
top of it (oci: pushing a tag, indexes, referrers; skopeo: pushing zstd layers; uncompressed: pushing the
engine's saved layers as they are); and, for the tests and the bench
only, Debian's docker-registry served on loopback (loopback). Imports only imagegen.core and the engine's containers.

COMPRESSIONS and the grammar of a registry are here, not beside the client, so that the command line can offer and
check them without loading docker-py and oras."""

import re

# The distribution spec's reference grammar (distribution/reference): a domain, then path components.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]{{1,5}})?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
REGISTRY = re.compile(rf"{_HOST}(?:/{_PATH_COMPONENT})*")

# Of a pushed image's layers: gzip by the engine's push (the default), zstd by skopeo, none by uncompressed.
COMPRESSIONS = ("gzip", "zstd", "none")


def registry_problem(registry: str) -> str | None:
    """Why HOST[/NAMESPACE] is not a registry the distribution spec's grammar allows (a scheme, `..`, a user part,
    upper case in the namespace); None when it is one."""
    if REGISTRY.fullmatch(registry):
        return None
    if "://" in registry:
        return f"{registry!r} is not HOST[/NAMESPACE]: leave out the scheme ({registry.split('://', 1)[1]!r})"
    return (f"{registry!r} is not HOST[/NAMESPACE] as the distribution spec's reference grammar has it: a host "
            "(letters, digits, dots and dashes, an optional :PORT), then path parts of lower-case letters, digits "
            "and single separators (. _ __ -), e.g. ghcr.io/acme or 127.0.0.1:5000")
