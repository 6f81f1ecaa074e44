"""What the tools (``tools/``) and :mod:`mmlape.analysis` share: launching
a run and checking its inputs (:mod:`mmlape.apis.launch`).

This floor sits above :mod:`mmlape.models` and beside
:mod:`mmlape.engine`: it may import both the models and the utilities, and
nothing below it imports it.
"""
