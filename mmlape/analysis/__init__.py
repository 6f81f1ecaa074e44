from .correlation import pearson, token_pe_statistics
from .flops import flop_counter
from .model_io import build_from_config, load_backbone
from .params import ParamCount, count_parameters
from .pe_similarity import (cosine_similarity, plot_similarity_grid,
                            received_pes, token_similarity_maps)

__all__ = [
    'ParamCount', 'build_from_config', 'cosine_similarity', 'count_parameters',
    'flop_counter', 'load_backbone', 'pearson', 'plot_similarity_grid',
    'received_pes', 'token_pe_statistics', 'token_similarity_maps'
]
