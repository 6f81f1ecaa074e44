"""What mmlape's backbones share: ``init_cfg=dict(type='Pretrained', ...)``
and the reading of ``out_indices``."""
from typing import List, Sequence, Union

from mmengine.model import BaseModule

__all__ = ['PretrainedBackbone', 'parse_out_indices']


def parse_out_indices(out_indices: Union[int, Sequence[int]], count: int,
                      what: str) -> List[int]:
    """``out_indices`` (an int or a sequence, negative ones counted from the
    end) as sorted distinct indices into ``count`` ``what`` (layers,
    stages); a clear error for none or one outside ``[-count, count)``."""
    if isinstance(out_indices, int):
        out_indices = [out_indices]
    if not out_indices:
        raise ValueError(f'out_indices must name at least one of the '
                         f'{count} {what}')
    parsed = []
    for idx in out_indices:
        real = idx + count if idx < 0 else idx
        if not 0 <= real < count:
            raise ValueError(f'out_indices contains {idx}, outside '
                             f'[-{count}, {count})')
        parsed.append(real)
    return sorted(set(parsed))


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
