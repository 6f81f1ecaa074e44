"""The checkpoint path of :class:`~mmlape.models.backbones.LaPET2TViT`: the
ViT's, except that a file's fixed sinusoid is kept and fitted like a
learnable PE (as mmpretrain's ``T2T_ViT``); a file without one gets the
table of the model's grid.
"""
from collections import OrderedDict
from typing import Dict, List, Mapping, Optional

from mmengine.logging import print_log
from torch import Tensor

from ..layers.pos_embed import build_1d_sincos
from .common import BACKBONE_PREFIX, Converted, strip_prefix
from .vit import ViTCheckpoints, ViTSpec
from .vit_family import VIT_FAMILY

__all__ = ['T2T_CHECKPOINTS', 'T2T_FORMATS']

#: The layouts whose ``pos_embed`` is T2T-ViT's stored sinusoid.
T2T_FORMATS = ('t2t_vit', 'mmpretrain_t2t')
_PE_KEYS = ('pos_embed', BACKBONE_PREFIX + 'pos_embed')


class T2TCheckpoints(ViTCheckpoints):
    """The ViT's checkpoint path, keeping T2T-ViT's stored sinusoid."""
    name = 'T2T-ViT'

    def backbone_state(self, checkpoint: Mapping,
                       prefix: Optional[str]) -> Dict[str, Tensor]:
        """An official or mmpretrain T2T-ViT file converted as the ViT's
        path converts it (EMA weights of the official files), with its
        ``pos_embed`` kept; any other file as the ViT's path reads it."""
        sd = VIT_FAMILY.read(checkpoint)
        family = VIT_FAMILY.detect(sd)
        if family not in T2T_FORMATS:
            return super().backbone_state(checkpoint, prefix)
        tables = [sd[k] for k in _PE_KEYS if k in sd]
        rest = OrderedDict((k, v) for k, v in sd.items() if k not in _PE_KEYS)
        converted = VIT_FAMILY.convert_checkpoint({'state_dict': rest}, family,
                                                  'none')
        state = strip_prefix(converted['state_dict'], BACKBONE_PREFIX)
        if tables:
            state['pos_embed'] = tables[0]
        print_log(
            f'the file has the {family} layout: converted to mmlape\'s, '
            f'its stored sinusoid kept',
            logger='current')
        return state

    def convert_family_checkpoint(self, checkpoint: Mapping, family: str,
                                  head: Optional[str], **options) -> Dict:
        """As the ViT's path, with a T2T-ViT file's stored sinusoid kept
        (a tensor of this backbone's state dict)."""
        out = super().convert_family_checkpoint(checkpoint, family, head,
                                                **options)
        if family in T2T_FORMATS:
            sd = VIT_FAMILY.read(checkpoint, **options)
            tables = [sd[k] for k in _PE_KEYS if k in sd]
            if tables:
                out['state_dict'][BACKBONE_PREFIX + 'pos_embed'] = tables[0]
        return out

    def convert(self,
                state_dict: Mapping,
                fmt: Optional[str] = None,
                pe_type: Optional[str] = None) -> Converted:
        """The ViT's conversion, which drops a stored fixed sinusoid (the
        ViT rebuilds its own), with the sinusoid kept: here it is a tensor
        of the model's state dict."""
        conv = super().convert(state_dict, fmt, pe_type)
        if 'pos_embed' in state_dict and 'pos_embed' not in conv.state_dict:
            conv.state_dict['pos_embed'] = state_dict['pos_embed']
            conv.notes = [
                n for n in conv.notes if not n.startswith('pos_embed of')
            ]
        return conv

    def fit(self, state_dict: Dict[str, Tensor], prefix: str,
            spec: ViTSpec) -> List[str]:
        """A stored sinusoid is fitted (resized) to the model's grid; a
        state dict of this backbone without one gets the model's table."""
        key = prefix + 'pos_embed'
        notes: List[str] = []
        if (key not in state_dict and spec.pos_embed_shape is not None
                and any(k.startswith(prefix + 'blocks.') for k in state_dict)):
            rows, dims = spec.pos_embed_shape[-2:]
            state_dict[key] = build_1d_sincos(rows, dims)
            notes.append(f'{key}: not in the checkpoint; the fixed sinusoid '
                         f'of this model\'s grid is used')
        return notes + super().fit(state_dict, prefix, spec)


#: The checkpoint path of LaPET2TViT.
T2T_CHECKPOINTS = T2TCheckpoints()
