"""Sources feed the store: the Kubernetes watch (kube.py) and manifest files (manifests.py)."""
