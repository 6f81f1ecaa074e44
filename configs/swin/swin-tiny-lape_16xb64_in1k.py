# Swin-Ti with LaPE: no PE at the input; every layer from layer 0 normalises
# the PE stream with its own LayerNorm and adds it to its attention input;
# the stream crosses each patch merging through that merging's LN and
# reduction (docs/methods.md, Swin).
_base_ = './swin-tiny_16xb64_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='LaPE')))
