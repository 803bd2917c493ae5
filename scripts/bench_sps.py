#!/usr/bin/env python
"""Env+policy ceiling and PPO training SPS per env count; same as `jaxrl-async bench`.

python scripts/bench_sps.py --envs 4,64,512,2048 --repeats 3 --json bench.json
python scripts/bench_sps.py --xla-scheduler both   # justify the CPU scheduler default
"""

import sys

from jaxrl_async.tools.bench import main

if __name__ == "__main__":
    sys.exit(main())
