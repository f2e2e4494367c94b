"""torchrun entry for tests: run.main(argv) on this rank, then dump what it returned for the test to compare.

    torchrun --nproc_per_node=2 tests/ddp_worker.py OUT_DIR --ddp <run.py flags>
"""
import json
import os
import sys

import run

if __name__ == "__main__":
    out_dir, argv = sys.argv[1], sys.argv[2:]
    results = run.main(argv)
    with open(os.path.join(out_dir, f"rank{os.environ['RANK']}.json"), "w") as f:
        json.dump(results, f)
