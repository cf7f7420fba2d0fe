"""The launch line of a sweep point: hostile grid values, run for real.

Each quoting context a value can stand in (a plain argv item, bare in an ``sh -c`` script,
inside its single quotes, inside its double quotes, inside ``$(..)``) is rendered and run as a
real subprocess in a scratch folder: no value creates the ``pwned`` file, and the program
receives the value byte for byte as one argument. Contexts where no quoting is safe are
refused in one line that names the safe form."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tokenwatt.errors import SpecError
from tokenwatt.spec.template import render_command, shell_script_index

HOSTILE = [
    "x;touch${IFS}./pwned",  # the attack as reported
    "a b  c",  # spaces: one argument, spacing kept
    "it's",
    "'; touch ./pwned; '",  # ends a single-quoted region, if it could
    '"; touch ./pwned; "',  # ends a double-quoted region, if it could
    "$(touch ./pwned)",
    "`touch ./pwned`",
    "a\ntouch ./pwned",
    "x\\",  # a trailing backslash would escape the closing quote
    "\\'; touch ./pwned; #",
    "",
    "-n",
]
# the program at the end of every line: prints its argv as JSON, so one argument is one item
ECHO = f"{sys.executable} -c 'import json,sys; print(json.dumps(sys.argv[1:]))'"
CONTEXTS = {
    "argv": (ECHO + " {tok} pre{tok}post", lambda v: [v, f"pre{v}post"]),
    # the reported template: a shell script with the value bare in it
    "sh bare": (
        "sh -c 'echo starting {tok} >&2; exec " + sys.executable + ' -c "import json,sys; '
        "print(json.dumps(sys.argv[1:]))\" {tok}'",
        lambda v: [v],
    ),
    "sh single quotes": (
        f"sh -c \"exec {sys.executable} -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "
        "'pre {tok} post'\"",
        lambda v: [f"pre {v} post"],
    ),
    "bash double quotes": (
        "bash -c 'exec " + sys.executable + ' -c "import json,sys; '
        'print(json.dumps(sys.argv[1:]))" "pre {tok} post" "{tok}"\'',
        lambda v: [f"pre {v} post", v],
    ),
    "sh command substitution": (
        "sh -c 'exec " + sys.executable + ' -c "import json,sys; '
        'print(json.dumps(sys.argv[1:]))" "$(printf %s {tok})"\'',
        # $(..) drops trailing newlines, as a shell does with any output
        lambda v: [v.rstrip("\n")],
    ),
}


def run(argv: list[str], cwd: Path) -> list[str]:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=20, check=True)
    got: list[str] = json.loads(proc.stdout)
    return got


@pytest.mark.parametrize("context", list(CONTEXTS))
def test_no_value_runs_and_each_stays_one_argument(tmp_path: Path, context: str) -> None:
    template, expected = CONTEXTS[context]
    for value in HOSTILE:
        argv = render_command(template, {"tok": value})
        assert run(argv, tmp_path) == expected(value), (context, value, argv)
        assert not (tmp_path / "pwned").exists(), (context, value, argv)


def test_the_old_substitution_did_run_the_value(tmp_path: Path) -> None:
    """The control: shell-quoting the value inside the user's single quotes (what the launch
    line did) runs it, so the scratch folder and the check above can see an injection."""
    import shlex

    script = f"echo starting {shlex.quote('x;touch${IFS}./pwned')}"
    subprocess.run(["sh", "-c", f"sh -c '{script}'"], cwd=tmp_path, check=True, timeout=20)
    assert (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("template", "where"),
    [
        ("sh -c 'echo `echo {tok}`'", "after a backtick"),
        ("sh -c 'echo ${{X:-{tok}}}'", "inside ${...}"),
        ("bash -c 'echo $(( {tok} + 1 ))'", "arithmetic"),
        ("sh -c 'echo a # {tok}'", "inside a comment"),
        ("sh -c 'cat <<E\n{tok}\nE'", "here-document"),
        ("sh -c 'echo \\{tok}'", "right after a backslash"),
        ("bash -c 'echo ${tok}'", "right after a $"),  # $'..' would read the value's escapes
        ("bash -c \"echo $'{tok}'\"", "inside $'...'"),
        ("sh -c 'x=$(case a in a) echo {tok};; esac)'", "'case' inside $(...)"),
    ],
)
def test_unsafe_contexts_are_refused_naming_the_safe_form(template: str, where: str) -> None:
    with pytest.raises(SpecError) as err:
        render_command(template, {"tok": "v"})
    msg = str(err.value)
    assert where in msg and "{tok}" in msg and "\n" not in msg
    assert "sh -c '... \"$1\" ...' sh {tok}" in msg and "server.env" in msg


def test_the_safe_form_passes_the_value_as_an_argument(tmp_path: Path) -> None:
    argv = render_command(
        'sh -c \'exec "$0" -c "import json,sys; print(json.dumps(sys.argv[1:]))" "$1"\' {py} {tok}',
        {"tok": "x;touch${IFS}./pwned", "py": sys.executable},
    )
    assert run(argv, tmp_path) == ["x;touch${IFS}./pwned"]
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("argv", "index"),
    [
        (["sh", "-c", "S"], 2),
        (["/bin/bash", "-lc", "S", "x"], 2),
        (["env", "A=1", "bash", "-o", "pipefail", "-e", "-c", "S"], 7),
        (["bash", "script.sh", "-c"], None),
        (["llama-server", "-c", "4096"], None),  # -c of another program is its own option
        (["sh", "-c"], None),
    ],
)
def test_the_script_of_a_shell_is_found(argv: list[str], index: int | None) -> None:
    assert shell_script_index(argv) == index


def test_a_nul_byte_or_unbalanced_quotes_are_one_line() -> None:
    with pytest.raises(SpecError, match="NUL byte"):
        render_command("srv {tok}", {"tok": "a\0b"})
    with pytest.raises(SpecError, match="balance the quotes"):
        render_command("srv 'unterminated {tok}", {"tok": "a"})
