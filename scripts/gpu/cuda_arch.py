"""Print the ``TORCH_CUDA_ARCH_LIST`` for the GPUs of this machine.

References:
    ``torch.cuda.get_device_capability`` and the ``TORCH_CUDA_ARCH_LIST``
    syntax of ``torch.utils.cpp_extension`` (``"8.0;9.0"``, ``+PTX`` for a
    PTX copy that newer GPUs compile at load time); ``nvcc --list-gpu-arch``
    for the architectures the installed nvcc can target (CUDA 13 dropped
    everything below 7.5).

``scripts/gpu/setup.sh`` calls it to build mmcv's CUDA ops for exactly the
GPUs it finds: one architecture compiles several times faster than torch's
default list. Where no GPU is visible (a login node building with
``FORCE_CUDA=1``), ``default_arch_list`` (``--default``) gives a short list
for the common training GPUs instead; ``scripts/cuda_env.py`` uses both.

Example:
    python scripts/gpu/cuda_arch.py                       # e.g. 9.0
    python scripts/gpu/cuda_arch.py --capability 8.6 --capability 9.0 \
        --nvcc-archs 75,80,86,89,90                       # 8.6;9.0
    python scripts/gpu/cuda_arch.py --default --nvcc-archs 75,80,86,90
                                                # 7.5;8.0;8.6;9.0+PTX
"""
import argparse
import re
import subprocess
import sys
from typing import List, Optional, Sequence, Tuple

Capability = Tuple[int, int]


def parse_capability(text: str) -> Capability:
    """``'9.0'`` or ``'90'`` to ``(9, 0)``."""
    m = re.fullmatch(r'(\d+)\.(\d)|(\d+)(\d)', text.strip())
    if not m:
        raise ValueError(f'capability {text!r} is not of the form 9.0')
    major, minor = (m.group(1), m.group(2)) if m.group(1) else (m.group(3),
                                                                m.group(4))
    return int(major), int(minor)


def nvcc_archs(nvcc: str = 'nvcc') -> Optional[List[Capability]]:
    """Architectures the installed nvcc targets, or None when unknown."""
    try:
        out = subprocess.run([nvcc, '--list-gpu-arch'],
                             capture_output=True,
                             text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.findall(r'compute_(\d+)', out.stdout)
    if out.returncode or not found:
        return None
    return sorted({parse_capability(f) for f in found})


def device_capabilities() -> List[Capability]:
    """Capabilities of the visible CUDA devices (empty without any)."""
    import torch
    if not torch.cuda.is_available():
        return []
    return [
        tuple(torch.cuda.get_device_capability(i))
        for i in range(torch.cuda.device_count())
    ]


def arch_list(capabilities: Sequence[Capability],
              supported: Optional[Sequence[Capability]] = None) -> str:
    """The ``TORCH_CUDA_ARCH_LIST`` for these GPUs.

    Each distinct capability is listed once, in order. A GPU newer than
    every architecture nvcc knows gets nvcc's newest one with ``+PTX`` (the
    driver compiles that PTX for the GPU when the library loads).

    Args:
        capabilities (Sequence[tuple]): ``(major, minor)`` per GPU.
        supported (Sequence[tuple], optional): What nvcc can target; None
            skips the check.

    Returns:
        str: e.g. ``'8.0;9.0'``.

    Raises:
        ValueError: No GPU, or a GPU older than anything nvcc targets.
    """
    if not capabilities:
        raise ValueError('no CUDA GPU is visible: set TORCH_CUDA_ARCH_LIST '
                         'yourself (e.g. "9.0") to build for a GPU that is '
                         'not here')
    out = []
    for cap in sorted(set(tuple(c) for c in capabilities)):
        entry = f'{cap[0]}.{cap[1]}'
        if supported is not None and cap not in supported:
            lower = [s for s in supported if s < cap]
            if not lower:
                raise ValueError(
                    f'a GPU of compute capability {entry} is older than '
                    f'every architecture this nvcc targets (oldest: '
                    f'{min(supported)[0]}.{min(supported)[1]}); use an '
                    f'older CUDA toolkit for it')
            best = max(lower)
            entry = f'{best[0]}.{best[1]}+PTX'
        if entry not in out:
            out.append(entry)
    return ';'.join(out)


#: The architectures built for when no GPU is visible: the GPUs ViTs are
#: usually trained on. 7.0 is the V100, 8.0 the A100 (and A30), 8.6 the A10,
#: A40 and RTX 30xx (its code also runs on 8.9: L4, L40, RTX 40xx), 9.0 the
#: H100/H200. ``+PTX`` on the newest lets the driver compile that PTX for a
#: newer GPU (Blackwell) when the library loads. Each architecture adds a
#: full device compile of every kernel, so the list stays short.
DEFAULT_ARCHS: Tuple[Capability, ...] = ((7, 0), (8, 0), (8, 6), (9, 0))


def default_arch_list(supported: Optional[Sequence[Capability]] = None) -> str:
    """The ``TORCH_CUDA_ARCH_LIST`` for a build where no GPU is visible.

    torch's extension builder reads the visible GPUs when
    ``TORCH_CUDA_ARCH_LIST`` is unset and fails without any (``FORCE_CUDA=1``
    on a login node), so such a build needs a list: ``DEFAULT_ARCHS``, cut to
    what nvcc targets. An architecture nvcc dropped is replaced by the
    oldest one of the same major that nvcc keeps (CUDA 13 dropped 7.0, so
    7.5 takes its place and the T4 keeps working), else left out. The
    newest entry gets ``+PTX``.

    Args:
        supported (Sequence[tuple], optional): What nvcc can target; None
            keeps ``DEFAULT_ARCHS`` as they are.

    Returns:
        str: e.g. ``'7.5;8.0;8.6;9.0+PTX'`` for CUDA 13.

    Raises:
        ValueError: nvcc targets none of the default architectures' majors.
    """
    chosen: List[Capability] = []
    for cap in DEFAULT_ARCHS:
        if supported is not None and cap not in supported:
            newer = [s for s in supported if s[0] == cap[0] and s > cap]
            if not newer:
                continue
            cap = min(newer)
        if cap not in chosen:
            chosen.append(cap)
    if not chosen:
        raise ValueError('this nvcc targets none of the default '
                         'architectures; set TORCH_CUDA_ARCH_LIST yourself '
                         '(e.g. "9.0")')
    entries = [f'{major}.{minor}' for major, minor in chosen]
    entries[-1] += '+PTX'
    return ';'.join(entries)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument(
        '--capability',
        action='append',
        help='a GPU capability such as 9.0 (repeatable); default: the '
        'visible GPUs')
    parser.add_argument(
        '--nvcc-archs',
        help='comma-separated architectures nvcc targets, such as '
        '75,80,90; default: asked from nvcc')
    parser.add_argument('--nvcc', default='nvcc', help='nvcc to ask')
    parser.add_argument(
        '--default',
        action='store_true',
        help='without --capability and without a visible GPU, print the '
        'default list for the common training GPUs instead of failing')
    args = parser.parse_args(argv)
    try:
        caps = ([parse_capability(c) for c in args.capability]
                if args.capability else device_capabilities())
        supported = ([parse_capability(a) for a in args.nvcc_archs.split(',')]
                     if args.nvcc_archs else nvcc_archs(args.nvcc))
        if not caps and args.default:
            print(default_arch_list(supported))
        else:
            print(arch_list(caps, supported))
    except ValueError as err:
        print(f'error: {err}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
