"""Which sides run data parallel groups, and how many ranks a group has.

With ``serving.<side>.data_parallel_size`` above 1, Ray Serve LLM's DPServer turns one replica
into a group of that many Serve replicas (ranks), gang-scheduled and restarted together
(RESTART_GANG). The rows and the alert that watch groups exist only for such sides.
"""

from __future__ import annotations

from app_config import Settings
from app_config.node_labels import GPU_ROLES


def data_parallel_sides(settings: Settings) -> dict[str, int]:
    """Each side whose replicas are DP groups, with its ranks per group, in GPU_ROLES order."""
    sizes = {role: settings.serving.engine(role).data_parallel_size for role in GPU_ROLES}
    return {role: size for role, size in sizes.items() if size > 1}
