from .block import Attention, Mlp, TransformerBlock
from .ffn import LeFF
from .parts import build_part, part_names
from .pe_join import (BasePEJoin, DefaultJoin, LaPEJoin, MPVGJoin, PEPlan,
                      PVGJoin, ShareJoin, UnshareJoin, build_pe_join,
                      pe_join_classes, pe_join_names)
from .pooling import BasePooling, ClsTokenPool, GAPPool, LCAPool, SeqPool
from .pos_embed import (PE_TYPES, build_1d_sincos, build_2d_sincos,
                        resize_pos_embed)
from .tokenizers import ConvTokenizer, I2TTokenizer, PatchEmbed, T2TTokenizer

__all__ = [
    'Attention', 'Mlp', 'TransformerBlock', 'BasePEJoin', 'DefaultJoin',
    'LaPEJoin', 'MPVGJoin', 'PEPlan', 'PVGJoin', 'ShareJoin', 'UnshareJoin',
    'build_pe_join', 'pe_join_names', 'pe_join_classes', 'PE_TYPES',
    'build_1d_sincos', 'build_2d_sincos', 'resize_pos_embed', 'LeFF',
    'build_part', 'part_names', 'BasePooling', 'ClsTokenPool', 'GAPPool',
    'LCAPool', 'SeqPool', 'ConvTokenizer', 'I2TTokenizer', 'PatchEmbed',
    'T2TTokenizer'
]
