"""Bad input: one clear error line, exit code != 0, no traceback, and no hang under DDP.

The cases are the rows of the bad-input table in docs/distributed.md; a test keeps the two in step.
"""
import re

import pytest

import run
from tests.unit.test_bad_input import CASES
from utils.errors import ConfigError


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_clear_error(tiny_args, tmp_path, case):
    make, message = CASES[case]
    extra = make(tmp_path, tiny_args)
    with pytest.raises(ConfigError, match=re.escape(message)):
        run.main(tiny_args + extra)
