"""Joining or starting a Ray cluster (aha/ray_cluster.py): the job's runtime environment, and
aha's own package shipped to workers on nodes where it is not installed."""

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend's tests need ray (pip install 'aha[ray]')")


def test_a_local_cluster_gets_the_runtime_environment_and_aha_shipped():
    from aha.config import RayConfig
    from aha.ray_cluster import release_ray, start_ray

    assert not ray.is_initialized()
    start_ray(RayConfig(object_store_mb=128, runtime_env={"env_vars": {"AHA_MARK": "here"}}, ship_aha=True),
              num_cpus=1)
    try:
        @ray.remote(num_cpus=0)
        def where():
            import os

            import aha

            return os.environ.get("AHA_MARK"), aha.__file__

        mark, path = ray.get(where.remote(), timeout=120)
        assert mark == "here"
        # the workers import aha from the copy Ray shipped, not from this environment's install
        assert "runtime_resources" in path and "py_modules" in path, path
    finally:
        release_ray()
    assert not ray.is_initialized()
