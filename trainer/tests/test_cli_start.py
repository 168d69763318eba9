"""The command line starts without trl or torch: `vlmgrpo info`, `selftest` and `make-tiny` run where trl is broken
or absent. (The package's size and import rules are tests/test_layout.py's, for imagegen and vlmgrpo alike.)"""

import subprocess
import sys

from conftest import ENV


def test_the_command_line_starts_without_trl_or_torch():
    """`vlmgrpo info`, `selftest` and `make-tiny` must start where trl is broken or absent; training commands
    import it after their signal handler is in place."""
    code = "import sys, vlmgrpo.cli; print(sorted({'trl', 'torch', 'transformers'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert result.stdout.strip() == "[]", result.stderr[-2000:]
