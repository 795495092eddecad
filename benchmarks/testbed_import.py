"""tests/testbed.py (real etcd + kube-apiserver) imported from the suite.

tests/ is not a package; its directory goes on sys.path, as tests/conftest.py does.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent.parent / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from testbed import (  # noqa: E402
    DIE_WITH_PARENT,
    ApiError,
    KubeClient,
    Testbed,
    find_testbin,
    free_port,
    object_path,
    resource_path,
    stop_popen,
)

__all__ = ["DIE_WITH_PARENT", "ApiError", "KubeClient", "Testbed", "find_testbin", "free_port", "object_path", "resource_path",
           "stop_popen"]
