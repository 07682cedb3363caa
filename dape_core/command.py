"""The ``dape`` command: run in a job server's child where one listens (``DAPE_JOB_SERVER``,
:mod:`dape_core.job_server`), else in this process (:func:`dape_core.cli.main`). ``python -m dape_core.command``
is the same command."""

from __future__ import annotations

import sys

from dape_core import job_server


def main() -> int:
    status = job_server.forward(sys.argv[1:])
    if status is not None:
        return status
    from dape_core import cli

    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
