from .block import Attention, Mlp, TransformerBlock
from .ffn import LeFF
from .mmcv_amp import (MMCV_FLOAT32_OPS, float32_autograd_function,
                       install_float32_mmcv_ops)
from .parts import build_part, part_names
from .pe_join import (BasePEJoin, DefaultJoin, LaPEJoin, MPVGJoin, PEPlan,
                      PVGJoin, ShareJoin, UnshareJoin, build_pe_join,
                      pe_join_names)
from .pooling import BasePooling, ClsTokenPool, GAPPool, LCAPool, SeqPool
from .pos_embed import (PE_TYPES, build_1d_sincos, build_2d_sincos,
                        resize_pos_embed)
from .tokenizers import ConvTokenizer, I2TTokenizer, PatchEmbed, T2TTokenizer

__all__ = [
    'Attention', 'Mlp', 'TransformerBlock', 'BasePEJoin', 'DefaultJoin',
    'LaPEJoin', 'MPVGJoin', 'PEPlan', 'PVGJoin', 'ShareJoin', 'UnshareJoin',
    'build_pe_join', 'pe_join_names', 'PE_TYPES', 'build_1d_sincos',
    'build_2d_sincos', 'resize_pos_embed', 'LeFF', 'build_part', 'part_names',
    'BasePooling', 'ClsTokenPool', 'GAPPool', 'LCAPool', 'SeqPool',
    'ConvTokenizer', 'I2TTokenizer', 'PatchEmbed', 'T2TTokenizer',
    'MMCV_FLOAT32_OPS', 'float32_autograd_function', 'install_float32_mmcv_ops'
]
