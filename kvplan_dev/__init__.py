"""Developer and test tooling: the local control plane (kube-apiserver + etcd + Prometheus on loopback), the
binaries it needs (built or installed from package registries only), vLLM-style history backfill, the
``kvplan-dev`` CLI and the demo. Never imported by ``kvcore`` or the operator."""
