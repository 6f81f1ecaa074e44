"""Checkpoints load with weights_only=True: mmengine training state is
allow-listed, anything else is refused."""
import pytest
import torch
from conftest import ToyData, ToyModel
from mmengine.runner import Runner, load_checkpoint

from mmlape.utils import UnsafeCheckpointError, safe_torch_load

#: mmengine's own loading, made safe as the tools make it.
pytestmark = pytest.mark.usefixtures('hosts_applied')


def _runner(work_dir, max_iters, resume=False, load_from=None):
    return Runner(
        model=ToyModel(),
        work_dir=str(work_dir),
        train_dataloader=dict(
            dataset=ToyData(),
            sampler=dict(type='DefaultSampler', shuffle=False),
            batch_size=2,
            num_workers=0,
            collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(
            optimizer=dict(type='AdamW', lr=0.01, weight_decay=0.05)),
        param_scheduler=[
            dict(
                type='LinearLR',
                start_factor=0.5,
                by_epoch=False,
                begin=0,
                end=2),
            dict(type='CosineAnnealingLR', by_epoch=False, begin=2, end=8)
        ],
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        default_hooks=dict(
            checkpoint=dict(type='CheckpointHook', interval=2, by_epoch=False),
            logger=dict(type='LoggerHook', interval=1)),
        resume=resume,
        load_from=load_from,
        default_scope='mmengine')


def test_mmengine_checkpoint_resumes_with_weights_only(tmp_path):
    _runner(tmp_path / 'a', max_iters=4).train()
    ckpt = tmp_path / 'a' / 'iter_4.pth'
    assert ckpt.is_file()
    # The default torch.load (weights_only=True on torch >= 2.6) reads it.
    state = torch.load(ckpt)
    assert 'message_hub' in state and 'optimizer' in state
    hub = state['message_hub']['log_scalars']
    assert type(hub['train/loss']).__name__ == 'HistoryBuffer'
    # Resume through mmengine continues from iteration 4.
    runner = _runner(
        tmp_path / 'a', max_iters=6, resume=True, load_from=str(ckpt))
    runner.train()
    assert runner.iter == 6
    # load_from (weights only) and load_checkpoint work too.
    model = ToyModel()
    load_checkpoint(model, str(ckpt))
    torch.testing.assert_close(model.linear.weight,
                               state['state_dict']['linear.weight'])


class Payload:
    """An arbitrary object that pickle would happily run code for."""

    def __reduce__(self):
        return (print, ('this must never run', ))


def test_arbitrary_pickled_object_is_refused(tmp_path, capsys):
    path = tmp_path / 'evil.pth'
    torch.save({'state_dict': ToyModel().state_dict(), 'x': Payload()}, path)
    with pytest.raises(UnsafeCheckpointError) as info:
        load_checkpoint(ToyModel(), str(path))
    message = str(info.value)
    assert 'Refusing to load checkpoint' in message and 'evil.pth' in message
    assert 'builtins.print' in message
    assert 'this must never run' not in capsys.readouterr().out
    # Plain torch.load stays weights_only too.
    with pytest.raises(Exception, match='Weights only load failed'):
        torch.load(path)
    assert path.is_file()  # nothing saved is lost


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match='does not exist'):
        load_checkpoint(ToyModel(), str(tmp_path / 'nope.pth'))


def test_official_training_checkpoint_with_args_loads(tmp_path):
    """The official DeiT/LaPE ``main.py`` saves its ``argparse.Namespace``
    beside the weights; it loads, and a pickled callable still does not."""
    import argparse
    path = str(tmp_path / 'checkpoint.pth')
    args = argparse.Namespace(model='deit_tiny_patch16_224', lr=5e-4)
    torch.save({'model': {'w': torch.ones(2)}, 'args': args, 'epoch': 3}, path)
    ckpt = safe_torch_load(path)
    assert ckpt['args'].model == 'deit_tiny_patch16_224'
    assert ckpt['args'].lr == 5e-4
    assert torch.equal(ckpt['model']['w'], torch.ones(2))
    evil = argparse.Namespace(hook=print)
    torch.save({'args': evil}, path)
    with pytest.raises(UnsafeCheckpointError, match='builtins.print'):
        safe_torch_load(path)
