"""``init_cfg=dict(type='Pretrained', ...)`` for mmlape's backbones."""
from mmengine.model import BaseModule

__all__ = ['PretrainedBackbone']


class PretrainedBackbone(BaseModule):
    """A backbone that loads ``init_cfg=dict(type='Pretrained', ...)``
    through its own ``load_pretrained(checkpoint, prefix)`` (which converts
    the layouts users hold and checks the join, see
    :mod:`mmlape.utils.checkpoint`) instead of mmengine's plain loader; any
    other ``init_cfg`` is applied as mmengine does."""

    def load_pretrained(self, checkpoint: str, prefix=None) -> None:
        raise NotImplementedError

    def init_weights(self) -> None:
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            self.load_pretrained(cfg['checkpoint'], cfg.get('prefix'))
            self._is_init = True
            return
        super().init_weights()
