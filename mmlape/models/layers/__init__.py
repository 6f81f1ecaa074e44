from .block import Attention, Mlp, SwinBlock, TransformerBlock, WindowAttention
from .ffn import LeFF
from .parts import build_part, part_names
from .pe_join import (DefaultJoin, LaPEJoin, MPVGJoin, PVGJoin, ShareJoin,
                      UnshareJoin, build_pe_join, pe_join_classes,
                      pe_join_names, resolve_pe_join)
from .pe_join_base import BasePEJoin
from .pe_plan import LayerPE, PEPlan, PEPlanCache
from .pooling import BasePooling, ClsTokenPool, GAPPool, LCAPool, SeqPool
from .pos_embed import (PE_TYPES, build_1d_sincos, build_2d_sincos,
                        resize_pos_embed)
from .tokenizers import ConvTokenizer, I2TTokenizer, PatchEmbed, T2TTokenizer
from .weight_init import init_generic_weights

__all__ = [
    'Attention', 'Mlp', 'TransformerBlock', 'SwinBlock', 'WindowAttention',
    'BasePEJoin', 'DefaultJoin', 'LaPEJoin', 'LayerPE', 'MPVGJoin', 'PEPlan',
    'PEPlanCache', 'PVGJoin', 'ShareJoin', 'UnshareJoin', 'build_pe_join',
    'pe_join_names', 'pe_join_classes', 'resolve_pe_join', 'PE_TYPES',
    'build_1d_sincos', 'build_2d_sincos', 'resize_pos_embed', 'LeFF',
    'build_part', 'part_names', 'BasePooling', 'ClsTokenPool', 'GAPPool',
    'LCAPool', 'SeqPool', 'ConvTokenizer', 'I2TTokenizer', 'PatchEmbed',
    'T2TTokenizer', 'init_generic_weights'
]
