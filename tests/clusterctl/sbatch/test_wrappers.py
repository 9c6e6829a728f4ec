"""#PBS and #BSUB lines translated into sbatch options as sbatch (src/sbatch/xlate.c) translates them."""

from __future__ import annotations

import pytest

from clusterctl.sbatch.wrappers import WrapperError, translate, wrapper_lines


def xl(header: str, current: dict[str, str | None] | None = None, release: tuple[int, int] | None = None) -> list:
    return [(t.option, t.value) for t in translate(f"#!/bin/bash\n{header}echo\n", current or {}, release)]


def test_torque() -> None:
    header = (
        "#PBS -N sweep -q batch -A ml -l nodes=2:ppn=4,walltime=01:00:00,mem=2gb\n"
        "#PBS -m abe -M alice -j oe -o out.log -e err.log -t 1-5%2 -h\n"
        "#PBS -W depend=afterok:7 -p 10 -v A=1,B=2 -l file=10mb,pmem=1gb,arch=x86\n"
    )
    assert xl(header) == [
        ("job-name", "sweep"),
        ("partition", "batch"),
        ("account", "ml"),
        ("nodes", "2"),
        ("ntasks", "8"),
        ("time", "01:00:00"),
        ("mem", "2g"),
        ("mail-type", "BEGIN,END,FAIL"),
        ("mail-user", "alice"),
        ("output", "out.log"),
        ("error", "err.log"),
        ("array", "1-5%2"),
        ("hold", None),
        ("dependency", "afterok:7"),
        ("nice", "10"),
        ("export", "A=1,B=2"),
        ("tmp", "10m"),
    ]


def test_pbs_pro_select_sets_cpus_per_task_from_its_ratio() -> None:
    assert xl("#PBS -l select=2:ncpus=8:mpiprocs=4\n#PBS -J 0-3\n") == [
        ("nodes", "2"),
        ("mincpus", "8"),
        ("ntasks-per-node", "4"),
        ("cpus-per-task", "2"),
        ("array", "0-3"),
    ]


def test_nodes_with_names_counts_and_gpus() -> None:
    assert xl("#PBS -l nodes=node1+node2:gpus=1\n") == [("gpus-per-node", "1"), ("nodelist", "node1,node2")]
    assert xl("#PBS -l nodes=2+1:ppn=2\n") == [("nodes", "3"), ("ntasks", "6")]
    assert xl("#PBS -l nodes=1:ppn=3\n") == [("nodes", "1"), ("ntasks", "3")]
    assert xl("#PBS -l nodes=n1:ppn=3\n") == [("ntasks", "3"), ("nodelist", "n1")]


def test_translations_add_to_what_is_set_so_far() -> None:
    current: dict[str, str | None] = {"export": "NONE", "constraint": "a100", "gres": "gpu:1"}
    assert xl("#PBS -v X=1\n#PBS -l proc=fast,walltime=5,mem=1g\n", current) == [
        ("export", "NONE,X=1"),
        ("constraint", "fast,a100"),  # and the key after proc= is stepped over, as by sbatch
        ("mem", "1g"),
    ]
    assert xl("#PBS -l naccelerators=2\n", current) == [("gres", "gpu:1,gpu:2")]
    assert xl("#PBS -l accelerator=true\n") == [("gres", "gpu:1")]


def test_long_options_and_values_on_the_next_line() -> None:
    assert xl("#PBS --job_name=x --resource_list\n#PBS walltime=10 --mail_op n\n") == [
        ("job-name", "x"),
        ("time", "10"),
        ("mail-type", "NONE"),
    ]


def test_ignored_options_and_keys_translate_to_nothing() -> None:
    assert (
        xl("#PBS -V -z -I -r y -k oe -S /bin/sh -u bob -c n -C X -W group_list=g\n#PBS -l vmem=1g,software=x\n") == []
    )


def test_bsub() -> None:
    header = '#BSUB -J b -n 2,4 -W 10 -M 1000 -q short -o o.log -e e.log\n#BSUB -cwd /tmp -m "h1 h2" -x\n'
    assert xl(header) == [
        ("job-name", "b"),
        ("ntasks", "4"),
        ("time", "10"),
        ("mem-per-cpu", "1000K"),
        ("partition", "short"),
        ("output", "o.log"),
        ("error", "e.log"),
        ("chdir", "/tmp"),
        ("nodelist", "h1,h2"),
        ("exclusive", None),
    ]


def test_bsub_lines_win_over_pbs_lines() -> None:
    assert xl("#PBS -N p\n#BSUB\n") == []


def test_working_directory_from_23_02() -> None:
    assert xl("#PBS -d /a -w /b\n", release=(26, 5)) == [("chdir", "/a"), ("chdir", "/b")]
    assert xl("#PBS -d /a\n") == [("chdir", "/a")]  # release unknown: the newest
    with pytest.raises(WrapperError, match=r"-d is translated by sbatch from Slurm 23\.02 on") as info:
        xl("#PBS -N x\n#PBS -d /a\n", release=(22, 5))
    assert info.value.lineno == 3


def test_lines_are_looked_for_past_the_header_up_to_100_other_lines() -> None:
    script = "#!/bin/bash\necho\n#PBS -N a\n" + "true\n" * 99 + "#PBS -q b\ntrue\n#PBS -A c\n"
    assert [(t.lineno, t.option) for t in translate(script, {})] == [(3, "job-name"), (103, "partition")]
    assert wrapper_lines(script.split("\n")) == [2, 102]


@pytest.mark.parametrize(
    ("header", "says"),
    [
        ("#PBS -Y\n", "-Y is not a #PBS option sbatch translates"),
        ("#PBS -N x stray\n", "'stray' is not an option"),
        ("#PBSX\n", "'X' is not an option"),
        ("#PBS -m x\n", "no mail event"),
        ("#PBS -W umask=022\n", "umask"),
        ("#PBS -l naccelerators=z\n", "naccelerators='z'"),
        ("#PBS -N\n", "-N needs a value"),
        ("#PBS --job=x\n", "--job is an ambiguous #PBS option"),
        ("#PBS --frob\n", "--frob is an unknown #PBS option"),
        ("#BSUB -n 2,\n", "give MIN,MAX or N"),
        ("#BSUB -J 'x\n", "unmatched '"),
    ],
)
def test_refusals_name_the_line(header: str, says: str) -> None:
    with pytest.raises(WrapperError, match=says) as info:
        xl(header)
    assert info.value.lineno == 2 and info.value.text == header.strip()


def test_outsized_and_non_ascii_counts_are_data_not_crashes() -> None:
    assert xl("#PBS -l nodes=" + "9" * 5000 + "\n") == [("nodes", "9" * 18)]  # refused later, by the bound
    with pytest.raises(WrapperError, match="not a positive number"):
        xl("#PBS -l naccelerators=²\n")
    assert xl("#PBS -l select=1:ncpus=²:mpiprocs=1\n") == [("nodes", "1"), ("mincpus", "²"), ("ntasks-per-node", "1")]
