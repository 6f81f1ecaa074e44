"""The sections of ``bench_gpu.py``, one module each: ``deit``,
``compiled`` (the ``compile`` section), ``dense`` (``adapter`` and
``segmenter``), ``msda`` and ``dist``; ``common`` holds what they share."""
