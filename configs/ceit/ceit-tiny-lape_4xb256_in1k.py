# CeiT-Ti with LaPE (hierarchical, every layer; the class token's position
# is part of the PE stream).
_base_ = './ceit-tiny_4xb256_in1k.py'

model = dict(backbone=dict(pe_join=dict(type='LaPE')))
