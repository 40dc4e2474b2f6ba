"""The Ray cluster aha's workers run on (rollout/ray_engine.py, rewards/ray_pool.py): joining
one or starting a local one, letting go of what was started here, stopping an actor."""

from __future__ import annotations

import os
from pathlib import Path

from aha.config import RayConfig


class RayUnavailable(RuntimeError):
    pass


def ray_module():
    try:
        import ray
    except ImportError as err:
        raise RayUnavailable("Ray workers (ray.rollout_workers, ray.reward_workers) need Ray: "
                             "pip install 'aha[ray]' (ray==2.60.0)") from err
    return ray


# whether start_ray connected this process (release_ray then disconnects it, and stops the
# local cluster it started); False when the caller had connected it before
_CONNECTED_HERE = False


def start_ray(cluster: RayConfig | None = None, num_cpus: int | None = None) -> None:
    """Join the cluster at cluster.address, or start a local one (object store capped at
    cluster.object_store_mb); nothing when this process is already connected. The job's
    runtime environment is cluster.runtime_env, with aha's own package shipped to the
    workers when cluster.ship_aha (for nodes where aha is not installed)."""
    global _CONNECTED_HERE
    ray = ray_module()
    if ray.is_initialized():
        return
    cluster = cluster or RayConfig()
    runtime_env = dict(cluster.runtime_env or {})
    if cluster.ship_aha:
        import aha

        runtime_env["py_modules"] = [*runtime_env.get("py_modules", []), str(Path(aha.__file__).parent)]
    if cluster.address:
        ray.init(address=cluster.address, log_to_driver=True, runtime_env=runtime_env or None)
    else:
        # Ray's own defaults take 30% of memory for the object store and start a dashboard
        ray.init(num_cpus=num_cpus or os.cpu_count(), object_store_memory=cluster.object_store_mb << 20,
                 include_dashboard=False, log_to_driver=True, configure_logging=False,
                 runtime_env=runtime_env or None)
    _CONNECTED_HERE = True


def release_ray() -> None:
    """Disconnect what start_ray connected (a local cluster it started stops); a connection
    the caller made stays."""
    global _CONNECTED_HERE
    if _CONNECTED_HERE:
        import ray

        ray.shutdown()
        _CONNECTED_HERE = False


def kill_actor(actor) -> None:
    """Stop a Ray actor; one already gone is no error."""
    import ray

    try:
        ray.kill(actor)
    except Exception:  # already gone
        pass
