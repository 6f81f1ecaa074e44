from .safe_load import (UnsafeCheckpointError, install_safe_loading,
                        openmmlab_safe_globals, safe_torch_load)

__all__ = [
    'UnsafeCheckpointError', 'install_safe_loading', 'openmmlab_safe_globals',
    'safe_torch_load'
]
