from .block import Attention, Mlp, TransformerBlock
from .pe_join import (BasePEJoin, DefaultJoin, LaPEJoin, MPVGJoin, PEPlan,
                      PVGJoin, ShareJoin, UnshareJoin, build_pe_join,
                      pe_join_names)
from .pos_embed import (PE_TYPES, build_1d_sincos, build_2d_sincos,
                        resize_pos_embed)

__all__ = [
    'Attention', 'Mlp', 'TransformerBlock', 'BasePEJoin', 'DefaultJoin',
    'LaPEJoin', 'MPVGJoin', 'PEPlan', 'PVGJoin', 'ShareJoin', 'UnshareJoin',
    'build_pe_join', 'pe_join_names', 'PE_TYPES', 'build_1d_sincos',
    'build_2d_sincos', 'resize_pos_embed'
]
