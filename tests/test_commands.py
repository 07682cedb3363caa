"""The Snakemake command lines the Makefile runs and the documentation gives parse as meant: ``--configfile`` takes
one or more files, so a target written after it would be read as a configuration file — every target must come
first (the parse is Snakemake's own argument parser)."""

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from snakemake.cli import get_argument_parser

from dape_core import config as grid
from dape_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


PENDING = re.compile(r"\$\(\S*dape verify --results results --pending\)")  # make's --forcerun of set-aside files


def parse(line: str):
    """Snakemake's reading of one command line (after ``snakemake``), comments and make's substitution of the
    set-aside files' ``--forcerun`` (empty when nothing is pending) removed."""
    words = shlex.split(PENDING.sub("", line.split(" #")[0]))
    return get_argument_parser().parse_args(words[words.index(next(w for w in words if w.endswith("snakemake"))) + 1:])


@pytest.mark.parametrize("target, wanted", [("reproduce", [[], []]), ("robustness", [["reports/robustness.md"]])])
def test_make_targets_give_snakemake_their_targets_and_one_configuration(target, wanted):
    printed = subprocess.run(["make", "-n", target, "VENV=.venv-unused"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    lines = [line for line in printed.splitlines() if re.search(r"/snakemake( |$)", line)]
    parsed = [parse(line) for line in lines]
    assert [sorted(a.targets or []) for a in parsed] == wanted
    assert PENDING.search(lines[0]), lines[0]  # the run redoes what dape verify set aside
    assert all([str(f) for f in a.configfile] == ["config.yaml"] for a in parsed)


def test_documented_snakemake_commands_name_only_configuration_files():
    docs = [ROOT / "README.md", ROOT / "reports" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    lines = [line.strip() for doc in docs for line in doc.read_text().splitlines()
             if line.strip().startswith("snakemake ")]
    assert len(lines) >= 4
    for line in lines:
        args = parse(line)
        assert all(str(f).endswith((".yaml", ".yml")) for f in args.configfile or []), line


@pytest.mark.parametrize("config, reports", [("config.yaml", "reports"), ("configs/smoke.yaml", "reports/smoke"),
                                             ("configs/grid.yaml", "reports/grid")])
def test_a_configuration_other_than_config_yaml_reports_into_its_own_folder(config, reports):
    """make's REPORTS and the workflow's (dape_core.config.names) agree: the committed reports/ is config.yaml's."""
    printed = subprocess.run(["make", "-n", "reproduce", "robustness", f"CONFIG={config}", "VENV=.venv-unused"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert f"-m dape_core.report_html {reports}/report.html -- " in printed
    assert f"snakemake {reports}/robustness.md" in printed
    assert grid.reports_dir(grid.configuration_name([config])) == reports


def test_a_configuration_named_like_a_reports_folder_is_refused():
    with pytest.raises(ConfigError, match="tables.yaml: its name 'tables' is a folder of reports/"):
        grid.configuration_name(["configs/tables.yaml"])


def test_the_readme_is_a_researchers_ten_minutes_and_names_documents_that_exist():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    named = set(re.findall(r"`(docs/[\w-]+\.md)`", readme))
    assert named and all((ROOT / doc).is_file() for doc in named), named
    assert "make test" in readme and "make test" in (ROOT / ".ci" / "run").read_text() + (ROOT / "Makefile").read_text()


def test_the_readme_names_every_tool_of_benchmarks():
    """Each runnable module and script of benchmarks/ (harness.py is the tools' shared helpers) is named in the README's
    Tools section."""
    readme = (ROOT / "README.md").read_text()
    tools = readme[readme.index("## Tools"):readme.index("## Where the rest lives")]
    names = [p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem not in ("__init__", "harness")]
    names += [p.name for p in (ROOT / "benchmarks").glob("*.sh")]
    assert len(names) >= 15
    assert [name for name in names if f"`{name}`" not in tools] == []


@pytest.mark.parametrize("fails", [False, True])
def test_the_html_report_is_moved_into_place_only_when_finished(tmp_path, fails):
    """A report cut short (as a file-size limit or a full disk stops it) leaves the previous one whole and says why
    in one line; a finished one replaces it. The command stands in for Snakemake: it writes --report's file."""
    import sys

    from dape_core.report_html import main

    out = tmp_path / "reports" / "report.html"
    out.parent.mkdir()
    out.write_text("<html>the previous report</html>")
    script = ("import sys; open(sys.argv[-1], 'w').write('<html>half'); "
              + ("raise OSError(27, 'File too large')" if fails else "open(sys.argv[-1], 'a').write('</html>')"))
    done = subprocess.run([sys.executable, "-m", "dape_core.report_html", str(out), "--", sys.executable, "-c",
                           script, "--report"], capture_output=True, text=True, cwd=ROOT)
    assert sorted(p.name for p in out.parent.iterdir()) == ["report.html"]  # no temporary file left
    if fails:
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines() == [f"snakemake --report: {out}: not written: OSError: [Errno 27] "
                                                    "File too large; its previous version is unchanged"]
        assert out.read_text() == "<html>the previous report</html>"
    else:
        assert done.returncode == 0 and out.read_text() == "<html>half</html>"
    assert main(["only-one-argument"]) == 2
