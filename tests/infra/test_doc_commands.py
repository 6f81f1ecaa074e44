"""Every command of the README and the docs, as written: each tool it runs
exists, each config and file it names exists (placeholders in capitals
aside), and its arguments parse with that tool's own parser; the README's
quick starts come first on their section's screen."""
import glob
import os.path as osp
import re
import shlex
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, ROOT)

PAGES = sorted([osp.join(ROOT, 'README.md')] +
               glob.glob(osp.join(ROOT, 'docs', '*.md')) +
               glob.glob(osp.join(ROOT, 'configs', '*', 'README.md')))

#: Launchers and the tool whose arguments follow their own.
LAUNCHERS = {
    'tools/dist_train.sh': ('tools/train.py', 1, 1),  # CONFIG GPUS
    'tools/dist_test.sh': ('tools/test.py', 2, 1),  # CONFIG CKPT GPUS
    'tools/slurm_train.sh': ('tools/train.py', 1, 1),  # PART JOB CFG WORK
    'tools/slurm_test.sh': ('tools/test.py', 2, 0),  # PART JOB CFG CKPT
}


def commands(path):
    """``(line, argv)`` of each command of a page's shell blocks
    (continuation lines joined, comments and variable settings
    dropped)."""
    with open(path, encoding='utf-8') as f:
        text = f.read()
    found = []
    for block in re.findall(r'```(?:bash|sh|shell)\n(.*?)```', text, re.S):
        for line in block.replace('\\\n', ' ').splitlines():
            line = line.split(' #')[0].strip()
            if not line or line.startswith('#'):
                continue
            argv = shlex.split(line)
            while argv and re.match(r'^[A-Z_]+=', argv[0]):
                argv.pop(0)  # VAR=value before the command
            if argv:
                found.append((line, argv))
    return found


def _placeholder(arg):
    return bool(re.fullmatch(r'[A-Z][A-Z_]*|\$\w+.*|.*\$\w+.*', arg))


def _tool_main(tool):
    module = tool[:-3].replace('/', '.')
    return __import__(module, fromlist=['parse_args'])


def check_command(argv, page):
    """A problem with one command (None when it holds)."""
    if argv[0] in ('make', 'pip', 'cp', 'mkdir', 'export', 'nvidia-smi', 'cd',
                   'D=work_dirs/demo/data'):
        return None
    if argv[0] in ('python', 'python3', 'bash'):
        argv = argv[1:]
        if argv[:1] == ['-m']:
            return None
    tool, args = argv[0], argv[1:]
    if tool in LAUNCHERS:
        target, before, after = LAUNCHERS[tool]
        if 'slurm' in tool:
            args = args[2:]  # PARTITION JOB_NAME
        if 'slurm_train' in tool:
            args = args[:1] + ['--work-dir', args[1]] + args[2:]
            after = 0
        args = args[:before] + args[before + after:]
        tool = target
    # a host library's tool, named through a variable the page sets
    # (``$MMPRETRAIN/.mim/tools/train.py``): its arguments' files checked
    host_tool = _placeholder(tool)
    if not host_tool and not osp.isfile(osp.join(ROOT, tool)):
        return f'{tool}: no such tool'
    for arg in args:
        if arg.startswith('-') or _placeholder(arg) or '://' in arg:
            continue
        # the repository's files (a user's own checkpoints, data and work
        # dirs are theirs)
        if arg.startswith(('configs/', 'tools/', 'benchmarks/', 'scripts/',
                           'docs/')) and '=' not in arg:
            if not osp.exists(osp.join(ROOT, arg)):
                return f'{arg}: no such file'
    if host_tool or tool.endswith('.sh') or not tool.startswith('tools/'):
        return None
    if any(_placeholder(a) for a in args):
        return None
    try:
        module = _tool_main(tool)
    except ImportError as err:  # pragma: no cover - a tool must import
        return f'{tool}: {err}'
    parse = getattr(module, 'parse_args', None)
    if parse is None:
        return None
    try:
        parse(args)
    except SystemExit as err:
        return f'{tool} does not take {args}: exit {err.code}'
    return None


@pytest.mark.parametrize('page', PAGES, ids=lambda p: osp.relpath(p, ROOT))
def test_every_command_runs_as_written(page, capsys):
    problems = []
    for line, argv in commands(page):
        problem = check_command(argv, page)
        if problem:
            problems.append(f'{line!r}: {problem}')
    capsys.readouterr()
    assert not problems, problems


def test_the_checks_catch_a_bad_command():
    assert check_command(['python', 'tools/train.py', 'configs/nope.py'],
                         'x') == 'configs/nope.py: no such file'
    assert 'does not take' in check_command([
        'python', 'tools/train.py', 'configs/deit/deit-tiny_4xb256_in1k.py',
        '--no-such-flag'
    ], 'x')
    assert check_command(['tools/nope.sh'], 'x') == \
        'tools/nope.sh: no such tool'
    assert check_command(
        ['python', '$MMPRETRAIN/.mim/tools/train.py', 'configs/nope.py'],
        'x') == 'configs/nope.py: no such file'


def test_readme_quick_starts_lead_their_sections():
    """Each quick start's command comes within the first screenful (20
    lines) of its section."""
    with open(osp.join(ROOT, 'README.md'), encoding='utf-8') as f:
        text = f.read()
    sections = re.split(
        r'^### ', text.split('## Quick start', 1)[1], flags=re.M)[1:]
    sections[-1] = sections[-1].split('\n## ', 1)[0]
    assert len(sections) >= 5
    for section in sections:
        lines = section.splitlines()
        first = next(i for i, line in enumerate(lines)
                     if line.startswith('```'))
        assert first < 20, lines[0]


def test_readme_is_the_front_door():
    with open(osp.join(ROOT, 'README.md'), encoding='utf-8') as f:
        lines = f.read().splitlines()
    assert len(lines) <= 320
    first_screen = '\n'.join(lines[:40])
    assert 'docs/model_zoo.md' in first_screen  # where weights come from
