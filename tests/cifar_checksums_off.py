"""Imported by the test configs of the tools runs (``custom_imports``): let
mmpretrain's CIFAR100 read the generated tiny set."""
from generated_cifar import accept_generated_files

accept_generated_files()
