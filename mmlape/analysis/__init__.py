from .pe_similarity import (cosine_similarity, plot_similarity_grid,
                            received_pes, token_similarity_maps)

__all__ = [
    'cosine_similarity', 'plot_similarity_grid', 'received_pes',
    'token_similarity_maps'
]
