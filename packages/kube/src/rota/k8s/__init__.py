"""Rota on Kubernetes: manifests, template checks and the cluster inventory."""
