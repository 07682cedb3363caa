"""``python -m dape_core.timing --worker``: a method's worker process (:mod:`dape_core.timing.workers`; commands on
stdin, replies on stdout). Measurements are ``dape time``'s."""

import sys

from dape_core.timing.workers import worker_main

if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.exit(worker_main())
    sys.exit("usage: python -m dape_core.timing --worker (commands on stdin; use `dape time` for measurements)")
