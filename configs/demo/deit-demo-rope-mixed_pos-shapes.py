# The demo with RoPE-Mixed instead of the absolute PE (its frequencies,
# blocks.{i}.attn.rope_freqs, not decayed).
_base_ = './deit-demo_pos-shapes.py'

model = dict(backbone=dict(pe_type='rope_mixed'))
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'.rope_freqs': dict(decay_mult=0.0)}))
