# DeiT-Tiny with RoPE-Mixed (Heo et al., ECCV 2024) instead of the absolute
# PE: every layer rotates its queries and keys by the patches' 2D positions,
# with frequencies learned per layer and head (blocks.{i}.attn.rope_freqs,
# not decayed); the DeiT recipe otherwise, so that it compares like for like
# with the joins.
_base_ = './deit-tiny_4xb256_in1k.py'

model = dict(backbone=dict(pe_type='rope_mixed'))
