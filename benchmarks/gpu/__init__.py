"""The sections of ``bench_gpu.py``; ``common`` holds what they share."""
