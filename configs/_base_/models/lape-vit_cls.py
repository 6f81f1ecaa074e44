# An mmpretrain image classifier around mmlape's ViT (default PE join) with
# mmpretrain's ViT class head. The classification configs that take no
# mmpretrain model base state only their arch, input, head size and loss.
model = dict(
    type='ImageClassifier',
    backbone=dict(type='LaPEViT', pe_join=dict(type='Default')),
    neck=None,
    head=dict(type='VisionTransformerClsHead'))
