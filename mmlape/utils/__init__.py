from .safe_load import (UnsafeCheckpointError, openmmlab_safe_globals,
                        safe_torch_load)

__all__ = [
    'UnsafeCheckpointError', 'openmmlab_safe_globals', 'safe_torch_load'
]
