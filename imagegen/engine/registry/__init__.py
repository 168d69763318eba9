"""The registry edge: its HTTP API (http: credentials, the client, manifests, tag digests) and OCI plumbing on
top of it (oci: pushing a tag, indexes, referrers). Imports only imagegen.core and the engine's containers."""
