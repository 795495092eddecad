"""tests/testbed.py (real etcd + kube-apiserver) imported from the suite.

tests/ is not a package; its directory goes on sys.path, as tests/conftest.py does.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent.parent / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from testbed import ApiError, KubeClient, Testbed, find_testbin, object_path, resource_path  # noqa: E402

__all__ = ["ApiError", "KubeClient", "Testbed", "find_testbin", "object_path", "resource_path"]
