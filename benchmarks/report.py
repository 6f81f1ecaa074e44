"""A benchmark's report: markdown tables, printed, and written where the
command line asks (``--out`` markdown, ``--json`` data)."""
import json
from typing import Any, Iterable, List, Optional, Sequence


def table(columns: Sequence, rows: Iterable[Sequence]) -> List[str]:
    """A markdown table's lines: the header, then one line per row (each
    cell as ``str`` writes it; a row may stop early, e.g. a failure's)."""

    def line(cells: Sequence) -> str:
        return '| ' + ' | '.join(str(c) for c in cells) + ' |'

    return [line(columns), '|' + '---|' * len(columns)
            ] + [line(r) for r in rows]


def print_and_save(text: str,
                   out: Optional[str] = None,
                   json_path: Optional[str] = None,
                   data: Any = None) -> None:
    """Print ``text``; write it to ``out`` and ``data`` as JSON to
    ``json_path`` where they are given."""
    print(text)
    if out:
        with open(out, 'w') as f:
            f.write(text)
    if json_path:
        with open(json_path, 'w') as f:
            json.dump(data, f, indent=1)
