"""Importing this module applies :func:`mmlape.hosts.apply`.

For a config run by a host library's own tools (mmpretrain's, mmdet's or
mmseg's ``tools/train.py``), which import what the config's
``custom_imports`` names::

    custom_imports = dict(imports=['mmlape', 'mmlape.hosts.applied'])
"""
from . import apply

apply()
