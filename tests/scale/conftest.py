"""A local Ray for the tests of this folder: two CPUs, started once, ended after them."""

from __future__ import annotations

import pytest

from tests.conftest import skip_or_fail


@pytest.fixture(scope="package")
def ray_local():
    try:
        import ray
    except ImportError:
        skip_or_fail("needs Ray: pip install -e '.[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
