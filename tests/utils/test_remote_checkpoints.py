"""Checkpoints named by URL load through the same safe loader as local
files (downloaded once to the torch hub cache, then weights only), a
malicious pickle by URL never runs, a failed download is one line; and
safetensors files load wherever a ``.pth`` does.

Every test serves its files from a loopback HTTP server it starts itself
(``tests/http_server.py``: bounded, stops by itself)."""
import os
import os.path as osp

import pytest
import torch
from http_server import CheckpointServer, refused_url

from mmlape.utils.download import (CheckpointDownloadError, cache_path,
                                   is_remote, url_cache_dir)
from mmlape.utils.errors import CheckpointError
from mmlape.utils.safe_load import (UnsafeCheckpointError, load_checkpoint,
                                    safe_torch_load)
from mmlape.utils.safetensors_file import (META_KEY, is_safetensors,
                                           safetensors_bytes)


class Payload:
    """Unpickling it would create the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f'touch {self.marker}', ))


def state():
    return {'a.weight': torch.arange(6.).view(2, 3), 'a.bias': torch.ones(2)}


@pytest.fixture
def torch_home(tmp_path, monkeypatch):
    """An empty torch hub cache of the test's own."""
    home = tmp_path / 'torch_home'
    monkeypatch.setenv('TORCH_HOME', str(home))
    monkeypatch.setattr(torch.hub, '_hub_dir', None)
    return home


@pytest.fixture
def served(tmp_path, torch_home):
    """A good, a malicious, a plain-pickle and a cut-short checkpoint on a
    loopback server; the marker the malicious one would create."""
    folder = tmp_path / 'served'
    folder.mkdir()
    marker = tmp_path / 'pwned'
    torch.save({
        'state_dict': state(),
        'meta': {
            'epoch': 3
        }
    }, folder / 'good.pth')
    torch.save({
        'state_dict': state(),
        'x': Payload(marker)
    }, folder / 'evil.pth')
    (folder / 'cut-good.pth').write_bytes((folder / 'good.pth').read_bytes())
    (folder / 'good.safetensors').write_bytes(
        safetensors_bytes({
            'state_dict': state(),
            'meta': {
                'epoch': 4
            }
        }))
    with CheckpointServer(folder, lifetime=120) as server:
        server.marker = marker
        yield server
    assert not marker.exists()


def test_a_url_is_downloaded_once_to_the_hub_cache_then_read_safely(served):
    url = served.url('good.pth')
    first = load_checkpoint(url, 'cpu')
    torch.testing.assert_close(first['state_dict'], state())
    assert first['meta'] == {'epoch': 3}
    cached = cache_path(url)
    assert cached == osp.join(torch.hub.get_dir(), 'checkpoints', 'good.pth')
    assert osp.isfile(cached)
    again = load_checkpoint(url, 'cpu')
    torch.testing.assert_close(again['state_dict'], state())
    assert served.requests['good.pth'] == 1  # the cache answered
    assert [n for n in os.listdir(url_cache_dir()) if 'partial' in n] == []


def test_a_malicious_pickle_by_url_never_runs(served):
    url = served.url('evil.pth')
    with pytest.raises(UnsafeCheckpointError) as info:
        load_checkpoint(url, 'cpu')
    message = str(info.value)
    assert f'"{url}"' in message and 'posix.system' in message
    assert '\n' not in message
    assert not served.marker.exists()
    # the refused copy is not kept: a fixed file is downloaded anew
    assert not osp.exists(cache_path(url))


@pytest.mark.parametrize('name, cause', [
    ('missing.pth', 'HTTP 404'),
    ('cut-good.pth', 'cut short'),
])
def test_a_failed_download_is_one_line_naming_url_and_cause(
        served, name, cause):
    url = served.url(name)
    with pytest.raises(CheckpointDownloadError) as info:
        load_checkpoint(url)
    message = str(info.value)
    assert f'checkpoint "{url}" cannot be downloaded' in message
    assert cause in message and '\n' not in message
    assert not osp.exists(cache_path(url))
    assert [n for n in os.listdir(url_cache_dir()) if 'partial' in n] == []


def test_a_refused_connection_is_one_line(torch_home):
    url = refused_url()
    with pytest.raises(CheckpointDownloadError) as info:
        load_checkpoint(url)
    assert f'"{url}" cannot be downloaded' in str(info.value)
    assert 'refused' in str(info.value).lower()


def test_cache_names():
    assert cache_path('https://h/x/deit_tiny-a1311bcf.pth').endswith(
        f'{os.sep}deit_tiny-a1311bcf.pth')
    hf = ('https://huggingface.co/timm/vit_small_patch16_rope_224.naver_in1k'
          '/resolve/main/model.safetensors')
    assert osp.basename(cache_path(hf)) == \
        'timm--vit_small_patch16_rope_224.naver_in1k--model.safetensors'
    with pytest.raises(CheckpointDownloadError, match='names no file'):
        cache_path('https://h/folder/')
    assert is_remote('s3://bucket/a.pth') and not is_remote('a/b.pth')


def test_another_file_backend_is_read_safely(tmp_path, monkeypatch):
    """A scheme of mmengine's file backends (here a registered test
    backend) is read into a temporary file and loaded weights only."""
    from mmengine.fileio.backends import BaseStorageBackend, register_backend

    marker = tmp_path / 'pwned'
    files = {}

    class Memory(BaseStorageBackend):

        def __init__(self, **kwargs):
            pass

        def get(self, filepath):
            return files[filepath]

        def get_text(self, filepath, encoding='utf-8'):
            raise NotImplementedError

    register_backend('mmlapetestmem', Memory, force=True, prefixes='memtest')
    good, evil = tmp_path / 'g.pth', tmp_path / 'e.pth'
    torch.save({'state_dict': state()}, good)
    torch.save({'x': Payload(marker)}, evil)
    files['memtest://g.pth'] = good.read_bytes()
    files['memtest://e.pth'] = evil.read_bytes()
    torch.testing.assert_close(
        load_checkpoint('memtest://g.pth')['state_dict'], state())
    with pytest.raises(UnsafeCheckpointError, match='memtest://e.pth'):
        load_checkpoint('memtest://e.pth')
    with pytest.raises(CheckpointDownloadError, match='memtest://none.pth'):
        load_checkpoint('memtest://none.pth')
    assert not marker.exists()


# ----------------------------------------------------------------------
# safetensors


def test_safetensors_round_trip_keeps_meta(tmp_path):
    path = tmp_path / 'm.safetensors'
    path.write_bytes(
        safetensors_bytes({
            'state_dict': state(),
            'meta': {
                'cfg': 'model = dict()',
                'epoch': 2
            }
        }))
    assert is_safetensors(str(path))
    loaded = safe_torch_load(str(path))
    torch.testing.assert_close(loaded['state_dict'], state())
    assert loaded['meta'] == {'cfg': 'model = dict()', 'epoch': 2}


def test_a_plain_safetensors_file_loads_as_its_state_dict(tmp_path):
    """timm's hub files: tensors only, no mmlape meta."""
    from safetensors.torch import save_file
    path = tmp_path / 'model.safetensors'
    save_file(state(), str(path), metadata={'format': 'pt'})
    loaded = load_checkpoint(str(path))
    assert META_KEY not in loaded
    torch.testing.assert_close(dict(loaded), state())


def test_safetensors_by_url(served):
    loaded = load_checkpoint(served.url('good.safetensors'))
    torch.testing.assert_close(loaded['state_dict'], state())
    assert loaded['meta'] == {'epoch': 4}


def test_a_damaged_safetensors_file_is_one_line(tmp_path):
    path = tmp_path / 'bad.safetensors'
    data = safetensors_bytes({'state_dict': state()})
    path.write_bytes(data[:-8])
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(str(path))
    assert str(path) in str(info.value) and '\n' not in str(info.value)


def test_tensors_that_share_memory_are_written_each(tmp_path):
    w = torch.randn(4, 2)
    data = safetensors_bytes({'state_dict': {'a': w, 'b': w, 'c': w[1:]}})
    path = tmp_path / 'tied.safetensors'
    path.write_bytes(data)
    loaded = safe_torch_load(str(path))
    torch.testing.assert_close(loaded['b'], w)
    torch.testing.assert_close(loaded['c'], w[1:])


def test_a_plain_pickle_says_what_it_is(tmp_path):
    import pickle
    plain = tmp_path / 'plain.pkl'
    plain.write_bytes(pickle.dumps({'a': [1, 2, 3]}))
    with pytest.raises(CheckpointError) as info:
        safe_torch_load(str(plain))
    assert 'plain Python pickle' in str(info.value)
    assert not isinstance(info.value, UnsafeCheckpointError)
    marker = tmp_path / 'pwned'
    evil = tmp_path / 'evil.pkl'
    evil.write_bytes(pickle.dumps({'x': Payload(marker)}))
    with pytest.raises(UnsafeCheckpointError) as info:
        safe_torch_load(str(evil))
    assert 'plain Python pickle' in str(info.value)
    assert 'posix.system' in str(info.value)
    assert not marker.exists()


def test_a_legacy_torch_file_still_loads(tmp_path):
    path = tmp_path / 'legacy.pth'
    torch.save({'state_dict': state()},
               path,
               _use_new_zipfile_serialization=False)
    torch.testing.assert_close(
        safe_torch_load(str(path))['state_dict'], state())


# ----------------------------------------------------------------------
# mmengine's own loaders, after mmlape.hosts.apply() (what the tools and
# a config's custom_imports of mmlape.hosts.applied run)


def test_mmengine_loads_every_scheme_through_the_safe_loader(
        served, hosts_applied):
    from mmengine.model import BaseModule
    from mmengine.runner.checkpoint import CheckpointLoader, load_checkpoint

    for prefix, loader in CheckpointLoader._schemes.items():
        assert getattr(loader, '_mmlape_safe', False), prefix

    class Net(BaseModule):

        def __init__(self, init_cfg=None):
            super().__init__(init_cfg)
            self.a = torch.nn.Linear(3, 2)

    net = Net()
    load_checkpoint(net, served.url('good.pth'))
    torch.testing.assert_close(net.a.weight, state()['a.weight'])
    with pytest.raises(UnsafeCheckpointError, match='posix.system'):
        load_checkpoint(Net(), served.url('evil.pth'))
    # mmengine's PretrainedInit (a module's init_cfg), with a prefix
    other = Net(
        init_cfg=dict(
            type='Pretrained', checkpoint=served.url('evil.pth'), prefix='a'))
    with pytest.raises(UnsafeCheckpointError):
        other.init_weights()
    assert not served.marker.exists()


def test_named_schemes_resolve_as_mmengine_does(hosts_applied):
    from mmlape.hosts.checkpoints import model_url
    url = model_url('torchvision://resnet18')
    assert url.startswith('https://') and url.endswith('.pth')
    assert model_url('https://x/y.pth') == 'https://x/y.pth'
    with pytest.raises(KeyError, match='no model "nope"'):
        model_url('open-mmlab://nope')


def test_safetensors_bytes_are_the_same_each_time():
    """The same checkpoint gives the same file (publish.py names files by
    their sha256)."""
    ckpt = {'state_dict': state(), 'meta': {f'k{i}': i for i in range(20)}}
    first = safetensors_bytes(ckpt)
    assert all(safetensors_bytes(ckpt) == first for _ in range(10))
    from safetensors.torch import load
    torch.testing.assert_close(load(first), state())
