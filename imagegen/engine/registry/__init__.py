"""The registry edge: its HTTP API (http: credentials, the client, manifests, tag digests) and OCI plumbing on
top of it (oci: pushing a tag, indexes, referrers; skopeo: pushing zstd layers). Imports only imagegen.core and the engine's containers."""
