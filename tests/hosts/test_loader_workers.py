"""The loader workers a run starts: ``auto_num_workers`` of a config,
resolved from the CPUs of each training process
(:mod:`mmlape.hosts.loader_workers`)."""
import os
import re

import pytest
from mmengine.config import Config

from mmlape.hosts.loader_workers import (apply_auto_num_workers,
                                         auto_num_workers, cpus_per_process,
                                         local_world_size)
from mmlape.utils.errors import ConfigError

TORCHRUN = {'LOCAL_WORLD_SIZE': '8'}
#: srun --ntasks-per-node=8 --cpus-per-task=10
SRUN = {'SLURM_NTASKS_PER_NODE': '8', 'SLURM_CPUS_PER_TASK': '10'}


@pytest.mark.parametrize(
    'launcher, env, expect',
    [
        ('pytorch', TORCHRUN, 8),
        ('slurm', SRUN, 8),
        ('pytorch', dict(TORCHRUN, SLURM_NTASKS_PER_NODE='1'), 8),
        ('pytorch', {}, 1),
        ('slurm', {
            'SLURM_NTASKS_PER_NODE': '4(x2)'
        }, 4),
        ('slurm', {
            'SLURM_NTASKS_PER_NODE': 'many'
        }, 1),
        ('pytorch', {
            'LOCAL_WORLD_SIZE': '0'
        }, 1),
        ('none', TORCHRUN, 1),  # one process, whatever the environment says
    ])
def test_local_world_size(launcher, env, expect):
    assert local_world_size(launcher, env) == expect


@pytest.mark.parametrize(
    'launcher, env, cpus, expect',
    [
        # torchrun's processes share the node's CPU set
        ('pytorch', TORCHRUN, 128, 16),
        ('pytorch', TORCHRUN, 4, 1),  # fewer CPUs than processes: 1
        # srun bound each task to its own 10 CPUs
        ('slurm', SRUN, 10, 10),
        # srun without binding: every task sees the job's 80 CPUs
        ('slurm', SRUN, 80, 10),
        # torchrun inside one Slurm task of 32 CPUs: its 8 ranks share them
        ('pytorch', dict(TORCHRUN, SLURM_CPUS_PER_TASK='32'), 32, 4),
        ('none', TORCHRUN, 12, 12),
    ])
def test_cpus_per_process(launcher, env, cpus, expect):
    assert cpus_per_process(launcher, env, cpus) == expect


def test_cpus_per_process_reads_the_affinity():
    assert cpus_per_process('none', {}) == len(os.sched_getaffinity(0))


def test_clamp():
    assert [auto_num_workers(4, 16, c) for c in (1, 5, 6, 17, 18, 64)] == \
        [4, 4, 5, 16, 16, 16]
    assert auto_num_workers(3, 3, 100) == 3


def _cfg(spec, launcher='pytorch', **loaders):
    base = dict(
        train_dataloader=dict(batch_size=2, num_workers=5),
        val_dataloader=dict(batch_size=2, num_workers=5),
        test_dataloader=dict(batch_size=2, num_workers=5))
    base.update(loaders)
    return Config(dict(base, auto_num_workers=spec, launcher=launcher))


def test_apply_sets_every_dataloader_and_says_so_once():
    cfg = _cfg(dict(floor=2, ceiling=12), test_dataloader=None)
    note = apply_auto_num_workers(cfg, TORCHRUN, cpus=64)
    assert cfg.train_dataloader.num_workers == 7  # 64 / 8 - 1
    assert cfg.val_dataloader.num_workers == 7
    assert cfg.test_dataloader is None
    assert note.startswith('auto_num_workers: 7 loader workers per process '
                           '= clamp(8 CPUs per process - 1, floor 2, '
                           'ceiling 12) (64 CPUs, 8 process(es) on this '
                           'node), set on train_dataloader, val_dataloader;')
    assert '\n' not in note
    # bounds: a crowded node gets the floor, a roomy one the ceiling
    cfg = _cfg(dict(floor=2, ceiling=12))
    apply_auto_num_workers(cfg, TORCHRUN, cpus=8)
    assert cfg.test_dataloader.num_workers == 2
    apply_auto_num_workers(cfg, {}, cpus=200)
    assert cfg.test_dataloader.num_workers == 12


def test_apply_leaves_main_process_loading_and_none():
    # e.g. a test's num_workers=0 over a config with persistent workers
    persistent = dict(batch_size=2, num_workers=0, persistent_workers=True)
    for spec in (dict(floor=2, ceiling=12), None):
        cfg = _cfg(
            spec,
            train_dataloader=persistent,
            val_dataloader=dict(batch_size=2))
        note = apply_auto_num_workers(cfg, {}, cpus=16)
        assert cfg.train_dataloader.num_workers == 0
        assert cfg.train_dataloader.persistent_workers is False
        assert 'num_workers' not in cfg.val_dataloader
        assert cfg.test_dataloader.num_workers == (12 if spec else 5)
        assert 'persistent_workers' not in cfg.test_dataloader
        if spec:
            assert 'set on test_dataloader;' in note
        else:
            assert note is None


@pytest.mark.parametrize('spec, message', [
    (4, 'auto_num_workers must be dict(floor=..., ceiling=...) or None, '
     'got 4'),
    (dict(floor=2), 'auto_num_workers must be dict(floor=..., ceiling=...)'),
    (dict(floor=2, ceiling=4, step=1), 'must be dict(floor=..., ceiling'),
    (dict(floor=0,
          ceiling=4), 'auto_num_workers.floor must be an integer >= 1, got 0'),
    (dict(floor=2, ceiling=4.5),
     'auto_num_workers.ceiling must be an integer >= 1, got 4.5'),
    (dict(floor=True, ceiling=4), 'floor must be an integer >= 1, got True'),
    (dict(floor=8, ceiling=4), 'auto_num_workers: floor 8 is above ceiling 4'),
])
def test_bad_bounds_are_one_line_config_errors(spec, message):
    cfg = _cfg(spec)
    with pytest.raises(ConfigError, match=re.escape(message)):
        apply_auto_num_workers(cfg, {}, cpus=16)
    assert cfg.train_dataloader.num_workers == 5
