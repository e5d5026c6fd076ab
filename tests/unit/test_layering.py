"""The client library stands on the contracts alone (docs/design.md, "The layers").

``lint-imports`` (in ``make check``) checks the static imports; this checks what importing the
client really loads, lazy imports and re-exports included.
"""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_client_library_loads_no_broker_or_controller_module() -> None:
    code = (
        "import sys\n"
        "import client.admin, client.consumer, client.group, client.producer\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('broker', 'controller')))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert loaded == "[]"
