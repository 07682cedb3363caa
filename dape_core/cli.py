"""The ``dape`` command: one sub-command per pipeline stage.

Each stage module defines ``add_arguments(parser)`` and ``run(args)`` and is imported only when its sub-command is
used, so ``dape --help`` stays fast. Every stage also takes ``--spec``: the job's settings as one JSON object
(setting → value), as a workflow rule hands them (:class:`dape_core.config.JobSpec`); the command reads it as the same
options given one by one and writes it to its log (stderr).
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys

from dape_core import io
from dape_core.errors import ArtefactError, ConfigError, WriteFailure
from dape_core.settings import fields

# sub-command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "tokenize": ("dape_core.data", "build token files from a corpus (built-in, local files or the Hub)"),
    "train": ("dape_core.train", "train a decoder language model"),
    "finetune": ("dape_core.finetune", "continue training a Hugging Face decoder with or without a DAPE processor"),
    "evaluate": ("dape_core.evaluate", "perplexity at many evaluation lengths, and the ΔP of appendix A"),
    "time": ("dape_core.timing", "forward / training-step time and peak memory (Table 7, §4.2)"),
    "che": ("dape_core.che.runner", "train and evaluate one CHE cell (Table 6)"),
    "report": ("dape_core.report.cli", "aggregate results into CSVs, tables, figures and claim verdicts"),
    "verify": ("dape_core.verify", "check every sealed and token file of a results directory; set damaged ones aside"),
    "seal": ("dape_core.seal", "seal the files of an older version's results once, as they are (the migration)"),
    "serve": ("dape_core.job_server", "run the workflow's train, evaluate and che jobs in forks of one warm process"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dape", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        if len(sys.argv) > 1 and sys.argv[1] == name:
            module = importlib.import_module(module_name)
            p = sub.add_parser(name, help=help_text, description=module.__doc__)
            module.add_arguments(p)
            p.add_argument(fields.SPEC_OPTION, default=None, metavar="JSON",
                           help="the job's settings as one JSON object, setting → value (a workflow rule's spec); "
                                "an option given beside it wins")
            p.set_defaults(_module=module, _parser=p)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    parser = build_parser()
    args = parser.parse_args()
    if not hasattr(args, "_module"):  # pragma: no cover - argparse guards this
        parser.error(f"unknown command {args.command!r}")
    spec = None
    if args.spec is not None:
        try:
            fields.apply_spec(args._parser, args.spec)
        except ConfigError as err:
            parser.exit(2, f"dape {args.command}: error: {err}\n")
        print(f"dape {args.command} --spec {shlex.quote(args.spec)}", file=sys.stderr, flush=True)  # to rerun by hand
        spec = io.spec_digest(json.loads(args.spec))
        args = parser.parse_args()
    io.stamp_job(f"dape {args.command}", spec)  # its seals say who wrote them, with which settings, from what
    try:
        result = args._module.run(args)
    except (ConfigError, ArtefactError) as err:
        parser.exit(2, f"dape {args.command}: error: {err}\n")
    except WriteFailure as err:
        parser.exit(2, f"dape {args.command}: error: {err.strerror}\n")
    finally:
        io.stamp_job(None, None)  # a caller in the same process (a test, a notebook) writes unstamped seals again
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
