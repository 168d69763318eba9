"""The registry edge: its HTTP API (http: credentials, the client, manifests, tag digests) and OCI plumbing on
top of it (oci: pushing a tag, indexes, referrers; skopeo: pushing zstd layers; uncompressed: pushing the
engine's saved layers as they are); and, for the tests and the bench
only, Debian's docker-registry served on loopback (loopback). Imports only imagegen.core and the engine's containers.

COMPRESSIONS is here, not in skopeo, so that the command line can offer them without loading docker-py and oras."""

# Of a pushed image's layers: gzip by the engine's push (the default), zstd by skopeo, none by uncompressed.
COMPRESSIONS = ("gzip", "zstd", "none")
