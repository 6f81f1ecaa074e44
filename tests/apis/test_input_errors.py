"""Wrong input ends the tools with one line on stderr and exit status 2,
wherever it surfaces (also inside runner.train() and runner.test(), and
under tools/dist_*.sh); a bug keeps its traceback."""
import os
import os.path as osp
import pickle
import random
import sys
import time

import pytest
import torch
from conftest import ROOT, demo_options, one_line_error, run

import mmlape  # noqa: F401
from mmlape.analysis import build_from_config
from mmlape.utils.errors import (CheckpointError, CheckpointNotFoundError,
                                 DataError)
from mmlape.utils.safe_load import UnsafeCheckpointError, safe_torch_load

sys.path.insert(0, ROOT)
from tools import common, test, train  # noqa: E402
from tools.analysis import pe_similarity  # noqa: E402
from tools.convert import to_mmlape  # noqa: E402

DEMO = osp.join(ROOT, 'configs/demo/deit-demo_pos-shapes.py')
DEMO_MPVG = osp.join(ROOT, 'configs/demo/deit-demo-mpvg_pos-shapes.py')


class Payload:
    """An object whose unpickling would run code."""

    def __reduce__(self):
        return (os.system, ('echo this must never run', ))


def options(data, *extra):
    """The demo config on ``data``, one iteration of 4 images; a fresh
    experiment name, since in-process runs must not share mmengine's
    named instances."""
    return demo_options(
        data, 1, batch_size=4,
        warmup=1) + [f'experiment_name=t{time.monotonic_ns()}', *extra]


@pytest.fixture(scope='module')
def bad_files(tmp_path_factory):
    """A good checkpoint and the kinds of bad ones."""
    folder = tmp_path_factory.mktemp('checkpoints')
    model, _ = build_from_config(DEMO)
    good = folder / 'good.pth'
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, good)
    raw = good.read_bytes()
    rng = random.Random(5)
    files = {
        'empty': b'',
        'truncated': raw[:len(raw) // 2],
        'random': b'\x17' + bytes(rng.randrange(256) for _ in range(4096)),
        'cut pickle': pickle.dumps({'a': list(range(100))}, protocol=2)[:40],
        'legacy unsafe': pickle.dumps({'x': Payload()}, protocol=2),
    }
    paths = {'good': str(good)}
    for name, content in files.items():
        path = folder / (name.replace(' ', '_') + '.pth')
        path.write_bytes(content)
        paths[name] = str(path)
    unsafe = folder / 'unsafe.pth'
    torch.save({'state_dict': model.state_dict(), 'x': Payload()}, unsafe)
    paths['unsafe'] = str(unsafe)
    return paths


# ----------------------------------------------------------------------
# checkpoints


@pytest.mark.parametrize('kind, error, reason', [
    ('empty', CheckpointError, 'the file is empty'),
    ('truncated', CheckpointError, 'truncated or damaged'),
    ('random', CheckpointError, 'not a PyTorch checkpoint'),
    ('cut pickle', CheckpointError, 'cannot be read'),
    ('unsafe', UnsafeCheckpointError, 'posix.system'),
    ('legacy unsafe', UnsafeCheckpointError, 'posix.system'),
    ('missing', CheckpointNotFoundError, 'does not exist'),
])
def test_bad_checkpoint_is_refused_naming_file_and_reason(
        kind, error, reason, bad_files, capfd):
    path = bad_files.get(kind, '/no/such/checkpoint.pth')
    with pytest.raises(error) as info:
        safe_torch_load(path)
    message = str(info.value)
    assert path in message and reason in message
    assert 'weights_only=False' not in message
    assert '\n' not in message
    assert 'this must never run' not in capfd.readouterr().out
    assert safe_torch_load(bad_files['good'])['meta'] == {}


def test_bad_checkpoint_given_to_the_tools(bad_files, pos_shapes_data,
                                           tmp_path, capsys):
    # --resume PATH, checked before the runner starts
    line = one_line_error(train.main, [
        DEMO, '--work-dir',
        str(tmp_path / 'a'), '--resume', bad_files['truncated']
    ] + options(pos_shapes_data), capsys)
    assert f'--resume: checkpoint "{bad_files["truncated"]}"' in line
    assert 'truncated or damaged' in line
    # load_from (fine-tuning)
    line = one_line_error(
        train.main,
        [DEMO, '--work-dir', str(tmp_path / 'b')] +
        options(pos_shapes_data, f'load_from={bad_files["random"]}'), capsys)
    assert 'load_from: checkpoint' in line and 'not a PyTorch' in line
    # tools/test.py
    line = one_line_error(
        test.main,
        [DEMO, bad_files['unsafe'], '--work-dir',
         str(tmp_path / 'c')] + options(pos_shapes_data), capsys)
    assert 'Refusing to load checkpoint' in line and 'posix.system' in line
    for path in bad_files.values():
        assert osp.exists(path)  # nothing saved is lost


def test_checkpoint_error_inside_runner_train(bad_files, pos_shapes_data,
                                              tmp_path, capsys):
    # An init_cfg that mmlape does not look at before the run: the error
    # surfaces inside runner.train(), while the backbone initialises.
    line = one_line_error(
        train.main,
        [DEMO, '--work-dir', str(tmp_path / 'a')] +
        options(pos_shapes_data, 'model.backbone.init_cfg.type=Pretrained',
                f'model.backbone.init_cfg.checkpoint={bad_files["empty"]}',
                'model.backbone.init_cfg.prefix=model.'), capsys)
    assert f'checkpoint "{bad_files["empty"]}" cannot be read' in line


def test_fail_while_running_keeps_a_bug_traceback(capsys):
    with pytest.raises(SystemExit) as info:
        with common.fail(running=True):
            raise DataError('image "x.png" does not exist')
    assert info.value.code == 2
    assert capsys.readouterr().err == 'error: image "x.png" does not exist\n'
    # A ValueError that is not mmlape's input error is a bug while running.
    with pytest.raises(ValueError, match='a bug'):
        with common.fail(running=True):
            raise ValueError('a bug')
    with pytest.raises(KeyError):
        with common.fail(running=True):
            raise KeyError('a bug')


# ----------------------------------------------------------------------
# data, work dirs, options


@pytest.fixture
def broken_data(pos_shapes_data, tmp_path):
    """Copies of the data: an empty annotation file, a corrupt image."""
    import shutil
    empty, corrupt = tmp_path / 'empty', tmp_path / 'corrupt'
    shutil.copytree(pos_shapes_data, empty)
    shutil.copytree(pos_shapes_data, corrupt)
    (empty / 'meta' / 'train.txt').write_text('\n')
    first = (corrupt / 'meta' / 'train.txt').read_text().split()[0]
    (corrupt / 'train' / first).write_bytes(b'\x89PNG not really')
    return str(empty), str(corrupt), str(corrupt / 'train' / first)


def test_unreadable_data_names_the_file(broken_data, pos_shapes_data, tmp_path,
                                        capsys):
    empty, corrupt, image = broken_data
    line = one_line_error(
        train.main,
        [DEMO, '--work-dir', str(tmp_path / 'a')] + options(
            pos_shapes_data, f'train_dataloader.dataset.data_root={empty}'),
        capsys)
    assert line == (f'error: annotation file "{empty}/meta/train.txt" is '
                    f'empty (train_dataloader.dataset.ann_file)')
    # Inside runner.train(): the corrupt image is read by the data loader.
    line = one_line_error(
        train.main,
        [DEMO, '--work-dir', str(tmp_path / 'b')] + options(
            pos_shapes_data, f'train_dataloader.dataset.data_root={corrupt}',
            'train_dataloader.sampler.shuffle=False'), capsys)
    assert line == (f'error: image "{image}" cannot be decoded (a corrupt '
                    f'file, or not an image)')


@pytest.mark.parametrize(
    'work_dir, expect',
    [
        ('{file}/work', 'cannot be created: "{file}" is a file'),
        # sysfs: no one may create or write files there, root included.
        ('/sys/fs/mmlape-work', 'cannot be created: '),
        ('/sys/fs', 'cannot be written: '),
    ])
def test_unwritable_work_dir(work_dir, expect, pos_shapes_data, tmp_path,
                             capsys):
    if not osp.isdir('/sys/fs') and work_dir.startswith('/sys'):
        pytest.skip('needs Linux sysfs (a folder no one can write)')
    file = tmp_path / 'a_file'
    file.write_text('')
    work_dir = work_dir.format(file=file)
    line = one_line_error(train.main, [DEMO, '--work-dir', work_dir] +
                          options(pos_shapes_data), capsys)
    assert line.startswith(f'error: work dir "{work_dir}" ')
    head, reason = line.split(expect.format(file=file))
    assert head == f'error: work dir "{work_dir}" '
    assert reason in ('', 'Operation not permitted', 'Permission denied')


@pytest.mark.parametrize('option, expect', [
    ('train_cfg.max_iters=abc', "train_cfg.max_iters='abc': expects an "
     'integer (the config has 600)'),
    ('train_cfg.max_iters=2.5', 'expects an integer'),
    ('optim_wrapper.optimizer.lr=fast', "lr='fast': expects a number"),
    ('optim_wrapper.optimizer.lr=[1,2', 'error: --cfg-options '
     '"optim_wrapper.optimizer.lr=[1,2": Imbalanced brackets'),
    ('train_cfg.by_epoch=maybe', 'expects true or false'),
    ('param_scheduler.7.end=3', 'param_scheduler.7.end=3: Index 7 exceeds'),
    ('"lr"', 'expects KEY=VALUE, got ""lr""'),
])
def test_wrong_cfg_options(option, expect, pos_shapes_data, tmp_path, capsys):
    args = options(pos_shapes_data) + [option]
    line = one_line_error(
        train.main, [DEMO, '--work-dir', str(tmp_path)] + args, capsys)
    assert expect in line


def test_resume_when_last_checkpoint_names_a_missing_file(
        pos_shapes_data, tmp_path, capsys):
    work = tmp_path / 'work'
    work.mkdir()
    (work / 'last_checkpoint').write_text(str(work / 'iter_5.pth'))
    line = one_line_error(
        train.main,
        [DEMO, '--work-dir', str(work), '--resume'] + options(pos_shapes_data),
        capsys)
    assert f'names "{work}/iter_5.pth", which does not exist' in line


def test_config_syntax_error_names_the_file(tmp_path, capsys):
    bad = tmp_path / 'bad.py'
    bad.write_text('model = dict(\n    type=\n')
    child = tmp_path / 'child.py'
    child.write_text("_base_ = './bad.py'\n")
    for config in (bad, child):
        line = one_line_error(train.main, [str(config)], capsys)
        assert line.startswith(f'error: config "{bad}" line ')
        assert '<unknown>' not in line


# ----------------------------------------------------------------------
# a checkpoint of another model


@pytest.fixture(scope='module')
def default_ckpt(pos_shapes_data, tmp_path_factory):
    """A checkpoint saved by tools/train.py from the demo config."""
    work = tmp_path_factory.mktemp('default')
    assert train.main([DEMO, '--work-dir', str(work)] +
                      options(pos_shapes_data)) == 0
    return str(work / 'iter_1.pth')


@pytest.mark.parametrize('tool', ['resume', 'test'])
def test_checkpoint_of_another_join_is_refused(tool, default_ckpt,
                                               pos_shapes_data, tmp_path,
                                               capsys):
    share = options(pos_shapes_data, 'model.backbone.pe_join.type=Share')
    if tool == 'resume':
        argv = [DEMO, '--work-dir', str(tmp_path), '--resume', default_ckpt]
        main = train.main
    else:
        argv = [DEMO, default_ckpt, '--work-dir', str(tmp_path)]
        main = test.main
    line = one_line_error(main, argv + share, capsys)
    assert 'was saved from another model: model.backbone.pe_join is ' \
        "dict(type='Default') there but dict(type='Share') in this " \
        'config' in line


def test_other_fields_are_named_with_both_values(default_ckpt, pos_shapes_data,
                                                 tmp_path, capsys):
    argv = [DEMO, default_ckpt, '--work-dir', str(tmp_path)]
    line = one_line_error(
        test.main,
        argv + options(pos_shapes_data, 'model.backbone.pe_type=sincos2d'),
        capsys)
    assert ("model.backbone.pe_type is 'learnable' there but 'sincos2d' in "
            'this config') in line
    # a learnable PE's size is in the weights: the strict load names it
    line = one_line_error(
        test.main,
        argv + options(pos_shapes_data, 'model.backbone.img_size=64'), capsys)
    assert 'is a checkpoint of another model: 1 shape mismatch' in line
    assert 'backbone.pos_embed (1, 65, 96) vs (1, 257, 96)' in line


def test_checkpoint_without_recorded_config_is_checked_by_keys(
        default_ckpt, pos_shapes_data, tmp_path, capsys):
    state = safe_torch_load(default_ckpt)
    bare = tmp_path / 'bare.pth'
    torch.save({'state_dict': state['state_dict']}, bare)
    # Share has the same keys as Default: accepted, as before.
    assert test.main(
        [DEMO, str(bare), '--work-dir',
         str(tmp_path / 'a')] +
        options(pos_shapes_data, 'model.backbone.pe_join.type=Share')) == 0
    line = one_line_error(
        test.main, [DEMO, str(bare), '--work-dir',
                    str(tmp_path / 'b')] +
        options(pos_shapes_data, 'model.backbone.pe_join.type=LaPE'), capsys)
    assert 'is a checkpoint of another model: 8 missing' in line
    assert 'pe_norm' in line


def test_finetuning_from_another_join_is_a_logged_note(pos_shapes_data,
                                                       tmp_path, capfd):
    model, cfg = build_from_config(DEMO_MPVG)
    ckpt = tmp_path / 'mpvg.pth'
    torch.save(
        {
            'state_dict': model.state_dict(),
            'meta': {
                'cfg': cfg.pretty_text
            }
        }, ckpt)
    assert train.main(
        [DEMO_MPVG, '--work-dir',
         str(tmp_path / 'pvg')] +
        options(pos_shapes_data, 'model.backbone.pe_join.type=PVG',
                f'load_from={ckpt}')) == 0
    out = capfd.readouterr()
    log = out.out + out.err
    assert f'load_from: "{ckpt}" was saved from another backbone' in log
    assert "pe_join dict(type='MPVG', last_pe_source='pos_0', " in log
    assert "dict(type='PVG', hierarchical=True" in log


# ----------------------------------------------------------------------
# the smaller items


def test_pe_similarity_refuses_a_grid_that_is_not_positive(capsys):
    with pytest.raises(SystemExit) as info:
        pe_similarity.parse_args(
            ['c.py', 'x.pth', '--out-dir', 'o', '--grid', '0', '-3'])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith('error: argument --grid: expected a positive '
                          'integer, got 0')
    assert pe_similarity.parse_args(
        ['c.py', 'x.pth', '--out-dir', 'o', '--grid', '3',
         '5']).grid == [3, 5]


def test_converter_timm_format_does_not_drop_the_classifier(
        default_ckpt, tmp_path, capsys):
    dst = str(tmp_path / 'out.pth')
    # An mmlape checkpoint read as timm keeps its (prefixed) classifier.
    assert to_mmlape.main(
        ['--family', 'vit', default_ckpt, dst, '--format', 'timm']) == 0
    capsys.readouterr()
    src = safe_torch_load(default_ckpt)['state_dict']
    out = safe_torch_load(dst)['state_dict']
    assert torch.equal(out['head.layers.head.weight'],
                       src['head.layers.head.weight'])
    # A bare file whose classifier has no timm name: refused, not dropped.
    bare = {
        k[len('backbone.'):]: v
        for k, v in src.items() if k.startswith('backbone.')
    }
    bare['head.fc.weight'] = src['head.layers.head.weight']
    bare_path = str(tmp_path / 'bare.pth')
    torch.save({'model': bare}, bare_path)
    dst = str(tmp_path / 'bare_out.pth')
    assert to_mmlape.main(
        ['--family', 'vit', bare_path, dst, '--format', 'timm']) == 2
    err = capsys.readouterr().err
    assert 'head.fc.weight' in err and 'would be dropped' in err
    assert not osp.exists(dst)
    assert to_mmlape.main([
        '--family', 'vit', bare_path, dst, '--format', 'timm', '--head', 'none'
    ]) == 0
    assert 'dropped the classifier' in capsys.readouterr().out
    state = safe_torch_load(dst)['state_dict']
    assert not [k for k in state if k.startswith('head.')]


# ----------------------------------------------------------------------
# real processes: exit status, DataLoader workers, tools/dist_*.sh


@pytest.mark.slow
def test_dist_train_ends_with_the_first_ranks_error(pos_shapes_data, tmp_path):
    out = run(
        [
            'bash', 'tools/dist_train.sh', DEMO, '2', '--work-dir',
            str(tmp_path / 'w')
        ] + options(pos_shapes_data, 'train_cfg.max_iters=abc'),
        check=False,
        timeout=600,
        env=dict(PORT='29631'))
    assert out.returncode == 2, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last == ("error: --cfg-options train_cfg.max_iters='abc': "
                    'expects an integer (the config has 600)')


@pytest.mark.slow
def test_dist_test_ends_with_the_failed_ranks_error(default_ckpt,
                                                    pos_shapes_data, tmp_path):
    # One image of rank 0's half of the test set is gone; it is read in a
    # DataLoader worker, and rank 1 then loses its peer.
    import shutil
    copy = tmp_path / 'data'
    shutil.copytree(pos_shapes_data, copy)
    first = (copy / 'meta' / 'val.txt').read_text().split()[0]
    os.remove(copy / 'val' / first)
    out = run(
        [
            'bash', 'tools/dist_test.sh', DEMO, default_ckpt, '2',
            '--work-dir',
            str(tmp_path / 'w')
        ] +
        options(pos_shapes_data, f'test_dataloader.dataset.data_root={copy}',
                'test_dataloader.num_workers=2'),
        check=False,
        timeout=600,
        env=dict(PORT='29632'))
    assert out.returncode == 2, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last == f'error: image "{copy}/val/{first}" does not exist'
