"""The documentation's links: every relative link of the README, docs/ and
the configs' READMEs names a file that exists, and every ``#anchor`` a
heading of its target (as GitHub makes anchors from headings)."""
import glob
import os.path as osp
import re

import pytest
from conftest import ROOT

DOCS = sorted([osp.join(ROOT, 'README.md')] +
              glob.glob(osp.join(ROOT, 'docs', '*.md')) +
              glob.glob(osp.join(ROOT, 'configs', '*', 'README.md')))
#: ``[text](target)``, outside code spans
LINK = re.compile(r'\]\(([^)\s]+)\)')


def _unfenced(text):
    """``text`` without its fenced code blocks."""
    return re.sub(r'^```.*?^```', '', text, flags=re.S | re.M)


def _prose(text):
    """``text`` without fenced code blocks and code spans."""
    return re.sub(r'`[^`\n]*`', '', _unfenced(text))


def anchor_of(heading):
    """GitHub's anchor of a heading: lower case, punctuation other than
    ``-`` and ``_`` dropped, spaces made ``-``."""
    return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


def anchors(path):
    with open(path, encoding='utf-8') as f:
        text = _unfenced(f.read())
    # a heading's code span keeps its text in the anchor
    return {anchor_of(h) for h in re.findall(r'^#+ (.*)$', text, re.M)}


def test_anchor_of_follows_github():
    assert anchor_of('The eval gap profiled (H200, 2026-11-26)') == \
        'the-eval-gap-profiled-h200-2026-11-26'
    assert anchor_of('Drop-in: change the type in a config you have') == \
        'drop-in-change-the-type-in-a-config-you-have'
    assert anchor_of('Do the dense models learn?') == \
        'do-the-dense-models-learn'
    assert anchor_of('Swin-Ti on ImageNet-1K (`configs/swin/`)') == \
        'swin-ti-on-imagenet-1k-configsswin'


@pytest.mark.parametrize('doc', DOCS, ids=lambda p: osp.relpath(p, ROOT))
def test_every_link_finds_its_file_and_heading(doc):
    with open(doc, encoding='utf-8') as f:
        links = LINK.findall(_prose(f.read()))
    broken = []
    for link in links:
        if re.match(r'[a-z]+://|mailto:', link):
            continue
        path, _, anchor = link.partition('#')
        target = osp.normpath(osp.join(osp.dirname(doc), path)) \
            if path else doc
        if not osp.exists(target):
            broken.append(f'{link}: no such file')
        elif anchor and target.endswith('.md') and \
                anchor not in anchors(target):
            broken.append(f'{link}: no such heading')
    assert not broken, broken


def test_the_docs_are_checked():
    names = {osp.relpath(p, ROOT) for p in DOCS}
    assert {'README.md', 'docs/gpu.md', 'docs/speed.md'} <= names
