"""Directive headers read with sbatch's own rules (getopt_long), and neutralised for Slurm."""

from __future__ import annotations

import pytest

from clusterd.jobs.directives import DirectiveError, neutralise, parse_directives, resolve_long


def opts(script: str) -> list[tuple[str, str | None]]:
    return [(d.option, d.value) for d in parse_directives(script)]


def test_getopt_forms() -> None:
    script = (
        "#!/bin/bash\n#SBATCH --job-name=a --nodes 2 -n4 -c 2\n#SBATCH -p batch -H\n"
        "#SBATCH --ntasks-per-n=3   # comment\n#SBATCH --exclusive --nice=5\n#SBATCH -J 'two words'\n"
    )
    assert opts(script) == [
        ("job-name", "a"),
        ("nodes", "2"),
        ("ntasks", "4"),
        ("cpus-per-task", "2"),
        ("partition", "batch"),
        ("hold", None),
        ("ntasks-per-node", "3"),
        ("exclusive", None),
        ("nice", "5"),
        ("job-name", "two words"),
    ]


def test_header_ends_at_first_command_and_lookalikes_are_comments() -> None:
    script = (
        "#!/bin/bash\n\n# note\n# SBATCH --uid=0\n#sbatch --uid=0\n  #SBATCH --uid=0\n#SBATCH -t 5\n"
        "echo\n#SBATCH --uid=0\n"
    )
    assert opts(script) == [("time", "5")]


def test_no_space_after_the_family_reads_as_sbatch_reads_it() -> None:
    """sbatch 22.05: ``#SBATCH--time=7`` sets the limit; ``#SBATCHX`` and a stray word are
    "Invalid directive found in batch script"."""
    assert opts("#!/bin/bash\n#SBATCH--time=7\n#SBATCH\n") == [("time", "7")]
    for line in ("#SBATCHX --nodes=2", "#SBATCH -t 5 foo"):
        with pytest.raises(DirectiveError, match=r"script line 2: .*not an option"):
            parse_directives(f"#!/bin/bash\n{line}\n")


def test_abbreviations_resolve_as_sbatch_does() -> None:
    assert resolve_long("part") == "partition"
    assert resolve_long("mem") == "mem"  # exact match wins over --mem-per-cpu
    with pytest.raises(ValueError, match="ambiguous"):
        resolve_long("par")  # --parsable, --partition
    with pytest.raises(ValueError, match="not an sbatch option"):
        resolve_long("frobnicate")


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("#SBATCH --bbf=/etc/shadow", "--bbf is not allowed"),
        ("#SBATCH --bb=x", "--bb is not allowed"),
        ("#SBATCH -F /etc/hosts", "--nodefile is not allowed"),
        ("#SBATCH --nodefile=/etc/hosts", "--nodefile is not allowed"),
        ("#SBATCH --export-file=/proc/self/environ", "--export-file is not allowed"),
        ("#SBATCH --uid=0", "--uid is not allowed"),
        ("#SBATCH --gid=0", "--gid is not allowed"),
        ("#SBATCH --get-user-env", "--get-user-env is not allowed"),
        ("#SBATCH --priority=1", "--priority is not allowed"),
        ("#SBATCH --prio=1", "--priority is not allowed"),
        ("#SBATCH --reboot", "--reboot is not allowed"),
        ("#SBATCH -W", "--wait is not allowed"),
        ("#SBATCH --wait", "--wait is not allowed"),
        ("#SBATCH --wrap=id", "--wrap is not allowed"),
        ("#SBATCH --test-only", "--test-only is not allowed"),
        ("#SBATCH --par=debug", "ambiguous"),
        ("#SBATCH --frob", "not an sbatch option"),
        ("#SBATCH -Z", "-Z is not an sbatch option"),
        ("#SBATCH --requeue=yes", "takes no value"),
        ("#SBATCH --time", "needs a value"),
        ("#SLURM --export-file=/proc/self/environ", "--export-file is not allowed"),  # read as #SBATCH
        ("#PBS -l nodes=2", "#PBS directives are refused"),
        ("#BSUB -J x", "#BSUB directives are refused"),
        ("#SBATCH --job-name='x", "cannot read"),
    ],
)
def test_refused_directives_name_the_line(line: str, needle: str) -> None:
    with pytest.raises(DirectiveError) as info:
        parse_directives(f"#!/bin/bash\n# a comment\n\n{line}\necho\n")
    assert str(info.value).startswith("script line 4: ") and needle in str(info.value), str(info.value)


def test_neutralise_keeps_lines_and_hides_every_family() -> None:
    script = "#!/bin/bash\n#SBATCH -N 2\n#PBS -l x\n#SLURM --uid=0\n#BSUB -J y\necho\n#SBATCH --later\n"
    out = neutralise(script)
    assert out.count("\n") == script.count("\n")
    assert [ln[:9] for ln in out.split("\n")[1:5]] == ["#clusterd"] * 4
    assert out.endswith("echo\n#SBATCH --later\n")  # after the header: data, as to sbatch
    assert parse_directives(out) == []


def test_a_slurm_line_is_read_as_sbatch_reads_it() -> None:
    """sbatch 22.05 answers "Change from #SLURM to #SBATCH" and applies the line: so does clusterd."""
    assert opts("#!/bin/bash\n#SLURM --time=5\n") == [("time", "5")]
