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
        ("#PBS -W umask=022", "-W umask= has no sbatch option"),
        ("#BSUB -Z 1", "-Z is not a #BSUB option"),
        ("#PBS -X", "-X is not a #PBS option"),
        ("#PBSX", "not an option"),
        ("#SBATCH --comment=a : b", "unexpected ':'"),
        ("#SBATCH --job-name='x", "cannot read"),
        ("#SBATCH hetjob", "heterogeneous jobs are refused"),
        ("#SBATCH  PACKJOB", "heterogeneous jobs are refused"),
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


def test_a_quoted_hash_is_a_value_and_an_unquoted_one_a_comment() -> None:
    """sbatch 22.05 holds ``#SBATCH --comment "#1"`` with Comment=#1; an unquoted # ends the line."""
    assert opts('#!/bin/bash\n#SBATCH --comment "#1" -t 5\n#SBATCH -J a#b -p x\n') == [
        ("comment", "#1"),
        ("time", "5"),
        ("job-name", "a"),
    ]
    assert opts("#!/bin/bash\n#SBATCH --comment='x # y' --comment=\\#z\n") == [("comment", "x # y"), ("comment", "#z")]


def test_pbs_and_bsub_lines_are_translated_after_the_sbatch_lines() -> None:
    script = "#!/bin/bash\n#SBATCH -t 5 -J s\n#PBS -N p -l walltime=1:00:00,nodes=2:ppn=4\necho\n#PBS -q batch\n"
    assert opts(script) == [
        ("time", "5"),
        ("job-name", "s"),
        ("job-name", "p"),
        ("time", "1:00:00"),
        ("nodes", "2"),
        ("ntasks", "8"),
        ("partition", "batch"),  # past the header too, as sbatch looks for them
    ]
    directive = parse_directives(script)[2]
    assert directive.where == "script line 3: #PBS -N p -l walltime=1:00:00,nodes=2:ppn=4 (sbatch: --job-name=p)"
    assert opts("#!/bin/bash\n#BSUB -J b\n#PBS -N p\n") == [("job-name", "b")]  # one family: #BSUB first


def test_ignore_pbs_from_anywhere_skips_the_translation() -> None:
    script = "#!/bin/bash\n#PBS -N p -W umask=0\n"
    assert parse_directives(script, ignore_pbs=True) == []
    assert opts("#!/bin/bash\n#SBATCH --ignore-pbs\n#PBS -N p -W umask=0\n") == [("ignore-pbs", None)]


def test_pbs_working_directory_follows_the_release() -> None:
    script = "#!/bin/bash\n#PBS -d /tmp/w\n"
    assert [(d.option, d.value) for d in parse_directives(script, release=(24, 11))] == [("chdir", "/tmp/w")]
    with pytest.raises(DirectiveError, match=r"script line 2: #PBS -d /tmp/w: -d is translated by sbatch from"):
        parse_directives(script, release=(22, 5))


def test_neutralise_hides_pbs_lines_sbatch_would_read_past_the_header() -> None:
    script = "#!/bin/bash\necho\n#PBS -N p\n#BSUB -J b\n" + "true\n" * 101 + "#PBS -N far\n"
    lines = neutralise(script).split("\n")
    assert lines[2].startswith("#clusterd:") and lines[3].startswith("#clusterd:")
    assert lines[-2] == "#PBS -N far"  # sbatch stops looking after 100 other lines


def test_the_sbatch_lines_are_one_command_line_as_to_sbatch() -> None:
    """sbatch 22.05 holds these with JobName=split-name, TimeLimit=7 (an empty word ends its line)."""
    script = '#!/bin/bash\n#SBATCH -t 5 --job-name\n#SBATCH split-name\n#SBATCH -t\n#SBATCH 7 "" -p batch\n'
    directives = parse_directives(script)
    assert [(d.option, d.value, d.lineno) for d in directives] == [
        ("time", "5", 2),
        ("job-name", "split-name", 2),
        ("time", "7", 4),
    ]
    assert opts("#!/bin/bash\n#SBATCH -t 5 --\n") == [("time", "5")]
    with pytest.raises(DirectiveError, match=r"script line 3: #SBATCH x: 'x' is not an option"):
        parse_directives("#!/bin/bash\n#SBATCH -t 5 --\n#SBATCH x\n")
