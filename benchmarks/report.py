"""A benchmark's report: printed, and written where the command line
asks (``--out`` markdown, ``--json`` data)."""
import json
from typing import Any, Optional


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
