"""The GPU machine's scripts, as far as a CPU without network can test them:
the wheel fetcher's plan and dependency walk, the arch detection of the
setup script, the setup script's guards, and the GPU benchmark in its tiny
CPU mode (every section, one well-formed table)."""
import io
import json
import os
import os.path as osp
import re
import subprocess
import sys
import tarfile
import zipfile

import pytest
import torch
from conftest import ROOT

sys.path.insert(0, osp.join(ROOT, 'scripts', 'gpu'))
sys.path.insert(0, osp.join(ROOT, 'benchmarks'))

import bench_gpu  # noqa: E402
import cuda_arch  # noqa: E402
import fetch_wheels  # noqa: E402

# --------------------------------------------------------------------------
# fetch_wheels.py


def pins_in(path):
    """``name==version`` lines of a requirements file, read independently
    of the script."""
    with open(osp.join(ROOT, path)) as f:
        return re.findall(r'^([A-Za-z0-9_.-]+)==([^\s#;]+)', f.read(), re.M)


def test_fetch_list_follows_the_requirement_files():
    out = subprocess.run(
        [sys.executable, 'scripts/gpu/fetch_wheels.py', '--list'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    pins = pins_in('requirements/openmmlab.txt')
    assert {n
            for n, _ in pins
            } >= {'mmengine', 'mmcv', 'mmdet', 'mmsegmentation', 'mmpretrain'}
    for name, version in pins:
        kind = 'sdist' if name == 'mmcv' else 'wheel'
        assert f'fetch {kind} {name}=={version}' in ' '.join(
            line.split('  (')[0] for line in lines), name
    text = '\n'.join(lines)
    # a range pin travels even though the machine has the package
    assert re.search(r'fetch wheel setuptools[<>=,.0-9]+', text)
    # unpinned packages the GPU image has stay behind
    for name in ('matplotlib', 'regex', 'ninja', 'wheel'):
        assert f'skip  {name}' in text
    # missing unpinned ones are fetched; torch and the test tools are not
    assert 'fetch wheel pycocotools' in text
    assert 'fetch wheel ftfy' in text
    assert 'torch' not in text and 'pytest' not in text


def test_device_packages_list():
    present = fetch_wheels.read_device_packages()
    assert {
        'torch', 'torchvision', 'timm', 'numpy', 'ninja',
        'opencv-python-headless'
    } <= present
    assert not present & {'mmcv', 'mmengine', 'mmdet', 'mmpretrain'}
    # names are canonical (PEP 503)
    assert 'typing-extensions' in present and 'py-cpuinfo' in present


def write(path, text):
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


def test_plan_rules(tmp_path):
    write(
        str(tmp_path / 'requirements/a.txt'), '# comment\n'
        'alpha==1.2  # pinned\n'
        'present-pkg\n'
        'Absent_Pkg\n'
        'winonly; sys_platform == "win32"\n'
        'ranged>=2,<3\n')
    write(str(tmp_path / 'requirements/b.txt'), 'alpha<2\nmmcv==2.1.0\n')
    needs, skipped = fetch_wheels.plan(
        ('requirements/a.txt', 'requirements/b.txt'),
        present={'present-pkg', 'ranged'},
        root=str(tmp_path))
    by_name = {n.name: n for n in needs}
    assert set(by_name) == {'alpha', 'absent-pkg', 'ranged', 'mmcv'}
    assert by_name['alpha'].specifiers == ['==1.2', '<2']
    assert by_name['ranged'].requirement() == 'ranged<3,>=2'
    assert by_name['mmcv'].sdist and not by_name['alpha'].sdist
    reasons = dict(skipped)
    assert 'GPU machine' in reasons['present-pkg']
    assert 'marker' in reasons['winonly']


def test_plan_refuses_pip_options(tmp_path):
    write(str(tmp_path / 'requirements/a.txt'), 'ok\n-r other.txt\n')
    with pytest.raises(ValueError, match=r'a\.txt:2'):
        fetch_wheels.plan(('requirements/a.txt', ),
                          present=set(),
                          root=str(tmp_path))


def fake_wheel(folder, name, version, requires):
    path = osp.join(folder, f'{name.replace("-", "_")}-{version}-py3-none-'
                    f'any.whl')
    meta = f'Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n'
    meta += ''.join(f'Requires-Dist: {r}\n' for r in requires)
    with zipfile.ZipFile(path, 'w') as zf:
        zf.writestr(f'{name.replace("-", "_")}-{version}.dist-info/METADATA',
                    meta)
    return path


def fake_sdist(folder, name, version, requires_txt):
    path = osp.join(folder, f'{name}-{version}.tar.gz')
    with tarfile.open(path, 'w:gz') as tf:
        for member, text in (('PKG-INFO',
                              f'Metadata-Version: 2.1\nName: {name}\n'
                              f'Version: {version}\n'),
                             (f'{name}.egg-info/requires.txt', requires_txt)):
            data = text.encode()
            info = tarfile.TarInfo(f'{name}-{version}/{member}')
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def index(tmp_path):
    """A fake package index: name -> file."""
    src = str(tmp_path / 'index')
    os.makedirs(src)
    return {
        'top':
        fake_wheel(src, 'top', '1.0', [
            'dep-a>=1', 'numpy', 'opencv-python>=3', 'extra-only; extra == '
            '"all"', 'win-dep; sys_platform == "win32"',
            'py-old; python_version < "3.8"'
        ]),
        'dep-a':
        fake_wheel(src, 'dep-a', '1.5', ['dep-b', 'top']),
        'dep-b':
        fake_wheel(src, 'dep-b', '0.1', []),
        'mmcv':
        fake_sdist(
            src, 'mmcv', '2.1.0', 'addict\nnumpy\n\n[all]\nbig-extra\n\n'
            '[:sys_platform == "win32"]\nregex\n\n'
            '[:sys_platform == "linux"]\nlinux-dep\n'),
        'addict':
        fake_wheel(src, 'addict', '2.4.0', []),
        'linux-dep':
        fake_wheel(src, 'linux-dep', '1.0', []),
    }


def fake_download(index, calls):

    def download(need, dest):
        calls.append(need.requirement())
        target = osp.join(dest, osp.basename(index[need.name]))
        with open(index[need.name], 'rb') as f, open(target, 'wb') as g:
            g.write(f.read())
        return target

    return download


def test_resolve_walks_missing_dependencies(index, tmp_path):
    calls = []
    needs = [
        fetch_wheels.Need('top', '', 'req'),
        fetch_wheels.Need('mmcv', '==2.1.0', 'req')
    ]
    done = fetch_wheels.resolve(
        needs, {'numpy', 'opencv-python-headless'},
        str(tmp_path),
        download=fake_download(index, calls),
        log=lambda msg: None)
    assert [n.name for n in done
            ] == ['top', 'mmcv', 'dep-a', 'addict', 'linux-dep', 'dep-b']
    assert calls[:3] == ['top', 'mmcv==2.1.0', 'dep-a>=1']
    assert {n.name: n.version for n in done}['dep-a'] == '1.5'
    path = fetch_wheels.write_manifest(done, str(tmp_path))
    with open(path) as f:
        manifest = f.read()
    assert 'dep-b 0.1 dep_b-0.1-py3-none-any.whl' in manifest


def test_resolve_refuses_a_version_outside_a_later_specifier(index, tmp_path):
    index['dep-a'] = fake_wheel(str(tmp_path), 'dep-a', '1.5',
                                ['top>=2'])  # top 1.0 is fetched
    os.makedirs(tmp_path / 'dl')
    with pytest.raises(RuntimeError, match='top==1.0 .* top>=2'):
        fetch_wheels.resolve([fetch_wheels.Need('top', '', 'req')],
                             {'numpy', 'opencv-python-headless'},
                             str(tmp_path / 'dl'),
                             download=fake_download(index, []),
                             log=lambda msg: None)


def test_fetch_fails_over_the_carry_limit(index, tmp_path, monkeypatch,
                                          capsys):
    monkeypatch.setattr(fetch_wheels, 'pip_download', fake_download(index, []))
    monkeypatch.setattr(
        fetch_wheels, 'plan', lambda present:
        ([fetch_wheels.Need('top', '', 'req')], []))
    # What else lies in the checkout (a virtual environment, data) is not
    # this test's business: the working tree counts as 1 MiB here.
    monkeypatch.setattr(fetch_wheels, 'tree_bytes', lambda: 2**20)
    dest = str(tmp_path / 'whl')
    assert fetch_wheels.main(['--dest', dest, '--limit-mib', '1e-6']) == 1
    assert 'too large for one device call' in capsys.readouterr().err
    assert fetch_wheels.main(['--dest', dest]) == 0
    assert sorted(os.listdir(dest)) == [
        'MANIFEST.txt', 'dep_a-1.5-py3-none-any.whl',
        'dep_b-0.1-py3-none-any.whl', 'top-1.0-py3-none-any.whl'
    ]


# --------------------------------------------------------------------------
# cuda_arch.py (the arch list setup.sh builds mmcv for)

NVCC13 = [(7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (12, 0)]


@pytest.mark.parametrize('caps,expected', [
    ([(9, 0)], '9.0'),
    ([(9, 0), (8, 6), (9, 0)], '8.6;9.0'),
    ([(12, 1)], '12.0+PTX'),
    ([(8, 0), (13, 0)], '8.0;12.0+PTX'),
])
def test_arch_list(caps, expected):
    assert cuda_arch.arch_list(caps, NVCC13) == expected


def test_arch_list_refusals():
    with pytest.raises(ValueError, match='no CUDA GPU'):
        cuda_arch.arch_list([], NVCC13)
    with pytest.raises(ValueError, match='7.0 is older'):
        cuda_arch.arch_list([(7, 0)], NVCC13)
    # without nvcc's list, the capability itself
    assert cuda_arch.arch_list([(7, 0)], None) == '7.0'


def test_parse_capability():
    assert cuda_arch.parse_capability('9.0') == (9, 0)
    assert cuda_arch.parse_capability('90') == (9, 0)
    assert cuda_arch.parse_capability('121') == (12, 1)
    with pytest.raises(ValueError, match='not of the form'):
        cuda_arch.parse_capability('sm_90')


def fake_nvcc(tmp_path):
    path = tmp_path / 'bin' / 'nvcc'
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        '#!/bin/sh\n'
        'if [ "$1" = "--list-gpu-arch" ]; then\n'
        '  printf "compute_75\\ncompute_80\\ncompute_90\\n"\n'
        'else echo "Cuda compilation tools, release 13.0, V13.0.88"; fi\n')
    path.chmod(0o755)
    return str(path)


def test_cuda_arch_cli_asks_nvcc(tmp_path):
    nvcc = fake_nvcc(tmp_path)
    assert cuda_arch.nvcc_archs(nvcc) == [(7, 5), (8, 0), (9, 0)]
    assert cuda_arch.nvcc_archs(str(tmp_path / 'missing')) is None
    out = subprocess.run([
        sys.executable, 'scripts/gpu/cuda_arch.py', '--capability', '9.0',
        '--capability', '10.0', '--nvcc', nvcc
    ],
                         cwd=ROOT,
                         capture_output=True,
                         text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == '9.0;9.0+PTX'


def test_cuda_arch_cli_without_gpu():
    if torch.cuda.is_available():
        pytest.skip('this machine has a GPU')
    out = subprocess.run([sys.executable, 'scripts/gpu/cuda_arch.py'],
                         cwd=ROOT,
                         capture_output=True,
                         text=True,
                         timeout=120)
    assert out.returncode == 1
    assert 'no CUDA GPU is visible' in out.stderr


# --------------------------------------------------------------------------
# setup.sh


def test_shell_scripts_parse():
    for script in ('scripts/gpu/setup.sh', 'scripts/gpu/acceptance.sh'):
        out = subprocess.run(['bash', '-n', script],
                             cwd=ROOT,
                             capture_output=True,
                             text=True)
        assert out.returncode == 0, (script, out.stderr)


def test_setup_help_and_bad_option():
    out = subprocess.run(['bash', 'scripts/gpu/setup.sh', '--help'],
                         cwd=ROOT,
                         capture_output=True,
                         text=True)
    assert out.returncode == 0 and 'TORCH_CUDA_ARCH_LIST' in out.stdout
    out = subprocess.run(['bash', 'scripts/gpu/setup.sh', '--nope'],
                         cwd=ROOT,
                         capture_output=True,
                         text=True)
    assert out.returncode == 2 and 'unknown option --nope' in out.stderr


def test_setup_stops_without_wheels(tmp_path):
    """No wheel folder: one clear error before anything is installed."""
    env = dict(
        os.environ,
        PATH=f'{tmp_path / "bin"}:{os.environ["PATH"]}',
        PYTHON=sys.executable,
        WHEEL_DIR=str(tmp_path / 'none'),
        BUILD_DIR=str(tmp_path / 'build'))
    fake_nvcc(tmp_path)
    out = subprocess.run(['bash', 'scripts/gpu/setup.sh'],
                         cwd=ROOT,
                         env=env,
                         capture_output=True,
                         text=True,
                         timeout=300)
    assert out.returncode == 1
    assert 'must hold the wheels and one mmcv sdist' in out.stderr
    assert 'release 13.0' in out.stdout
    assert 'installing' not in out.stdout


# --------------------------------------------------------------------------
# bench_gpu.py


def test_bench_refuses_cuda_without_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip('this machine has a GPU')
    assert bench_gpu.main(['--sections', 'deit']) == 2
    assert '--device cpu --tiny' in capsys.readouterr().err


def test_bench_options():
    args = bench_gpu.parse_args(['--sections', 'DeiT,msda', '--tiny'])
    assert args.sections == ['deit', 'msda']
    assert args.dist_families == ['deit'] and args.compile_backend == 'eager'
    assert bench_gpu.parse_args([]).dist_families == list(
        bench_gpu.DIST_FAMILIES)
    with pytest.raises(SystemExit):
        bench_gpu.parse_args(['--joins', 'Default,Nope'])


def parse_table(text):
    lines = [line for line in text.splitlines() if line.startswith('|')]
    header = [c.strip() for c in lines[0].strip('|').split('|')]
    assert re.fullmatch(r'\|(---\|)+', lines[1])
    rows = [[c.strip() for c in line.strip('|').split('|')]
            for line in lines[2:]]
    return header, rows


@pytest.mark.slow
def test_bench_tiny_cpu_prints_every_section(tmp_path, capsys):
    threads = torch.get_num_threads()
    rows_json = str(tmp_path / 'rows.json')
    try:
        code = bench_gpu.main([
            '--device', 'cpu', '--tiny', '--joins', 'Default,LaPE,MPVG',
            '--work-root',
            str(tmp_path / 'dist'), '--json', rows_json
        ])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith('CPU (')
    assert 'torch ' + torch.__version__ in out
    header, rows = parse_table(out)
    assert header == list(bench_gpu.COLUMNS)
    assert all(len(r) == len(header) for r in rows)
    assert [r[0] for r in rows] == sorted((r[0] for r in rows),
                                          key=bench_gpu.SECTIONS.index)
    assert {r[0] for r in rows} == set(bench_gpu.SECTIONS)
    assert not [r for r in rows if r[-1].startswith('failed')], out
    by = {(r[0], r[1], r[2]): r for r in rows}
    deit = [r for r in rows if r[0] == 'deit' and r[2] != '-']
    assert {r[2]
            for r in deit
            } == {'Default', 'LaPE', 'MPVG', 'mmpretrain ViT', 'timm'}
    for r in deit:
        if r[2] == 'timm' and r[3] == '-':
            assert r[-1].startswith('skipped: ')  # timm is not installed
            continue
        assert r[3].endswith('img/s') and r[5].endswith('img/s')
        assert float(r[4]) > 0 and float(r[6]) > 0
    assert by['deit', 'DeiT-Ti b4', 'Default'][4] == '1.000'
    assert 'MFU' in by['deit', 'DeiT-B b4', 'LaPE'][-1]
    assert 'train' in by['deit', 'DeiT-B b4', 'LaPE'][-1]
    compiled = [r for r in rows if r[0] == 'compile']
    assert len(compiled) == 3
    for r in compiled:
        assert re.search(
            r'train: \d+ break\(s\).*eval: \d+ break\(s\).*'
            r'eval, cached plan: \d+ break\(s\)', r[-1])
        # the first train and eval steps compile at least one graph each
        graphs = re.search(
            r'\((\d+) graphs\); recompiles while timed: '
            r'(\d+)', r[-1])
        assert graphs and int(graphs.group(1)) >= 2, r[-1]
    for family in ('Mask R-CNN', 'UperNet'):
        joins = [r[2] for r in rows if r[0] == 'adapter' and family in r[1]]
        assert joins == ['Default', 'LaPE', 'MPVG (PVG join)']
    for r in rows:
        if r[0] in ('adapter', 'segmenter'):
            assert 'ms/step' in r[3] and 'loss' in r[-1]
            assert 'NOT FINITE' not in r[-1]
    assert len([r for r in rows if r[0] == 'msda']) == 2
    dist = [r for r in rows if r[0] == 'dist']
    assert len(dist) == 1 and 'deit-tiny-lape' in dist[0][1]
    assert 'accuracy/top1' in dist[0][5] and 'loss' in dist[0][-1]
    # the saved rows print the same table
    with open(rows_json) as f:
        assert len(json.load(f)['rows']) == len(rows)
    assert bench_gpu.main(['--merge', rows_json]) == 0
    assert parse_table(capsys.readouterr().out)[1] == rows


def test_dist_flexible_family_is_deit_under_ddp_strategy():
    from gpu.dist import dist_config, dist_overrides
    flex = dist_overrides('deit-flexible', '/data', True, 2)
    plain = dist_overrides('deit', '/data', True, 2)
    assert flex['runner_type'] == 'FlexibleRunner'
    assert flex['strategy'] == dict(type='DDPStrategy')
    assert 'runner_type' not in plain and 'strategy' not in plain
    runner = ('runner_type', 'strategy')
    assert {k: flex[k] for k in flex if k not in runner} == plain
    assert dist_config('deit-flexible') == dist_config('deit')
