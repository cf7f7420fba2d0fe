"""The sweep's ``{name}`` templates: plain text (URLs, env, ``set``) and the server's launch line.

The launch line is split into argv like a shell *before* anything is substituted, and a value
then becomes part of one argv item as it is: no shell ever reads it, so ``;``, ``$(..)`` or
spaces in a value are data (a path with spaces stays one argument). A shell runs only where
the user wrote one (``sh -c SCRIPT``, ``bash -lc SCRIPT``, ...). In that script a value is
substituted for the quoting context it stands in, so that it cannot end a quoted region: bare,
it is shell-quoted; inside ``'..'`` or ``".."`` the quote is closed, the shell-quoted value
inserted and the quote reopened (``'pre'`` + ``'value'`` + ``'post'`` is one word to the
shell). Where no quoting is safe (backticks, ``$'..'``, ``${..}``, arithmetic, a comment, a
here-document, right after a backslash or a bare ``$``) the template is refused with one line
naming the safe form: pass the value as an argument (``sh -c '... "$1" ...' sh {name}``) or
through ``server.env``. A script that *evaluates* its data (``eval``, arithmetic on it) still
does so.
"""

from __future__ import annotations

import os
import shlex
import string

from tokenwatt.errors import SpecError

__all__ = ["SHELLS", "Scalar", "render", "render_command", "shell_script_index"]

Scalar = str | int | float | bool
# programs whose ``-c`` argument is a shell script
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash"})
_WORD_BREAK = " \t\n;&|()<>"
_SAFE_FORM = (
    "pass the value as an argument (sh -c '... \"$1\" ...' sh {{{name}}}) or through server.env"
)
_FORMATTER = string.Formatter()


_Piece = tuple[str, str | None, str | None, str | None]


def _pieces(template: str, what: str) -> list[_Piece]:
    try:
        return list(_FORMATTER.parse(template))
    except ValueError as exc:
        raise SpecError(
            f"sweep {what}: {exc} in {template!r} (write {{{{ for a literal {{)"
        ) from None


def _check_field(
    name: str, spec: str | None, values: dict[str, Scalar], template: str, what: str
) -> None:
    if not name.isidentifier():
        raise SpecError(f"sweep {what}: {{{name}}} is not a plain name in {template!r}")
    if name not in values:
        known = ", ".join(sorted(values))
        raise SpecError(f"sweep {what}: {{{name}}} is not defined (known: {known})")
    if spec and "{" in spec:
        raise SpecError(f"sweep {what}: {{{name}:{spec}}} nests a placeholder; write it plainly")


def _value(piece: _Piece, values: dict[str, Scalar]) -> str:
    _, name, spec, conv = piece
    assert name is not None
    return format(_FORMATTER.convert_field(values[name], conv), spec or "")


def render(template: str, values: dict[str, Scalar], *, what: str) -> str:
    """``template`` with every ``{name}`` replaced as text; an unknown name is one line."""
    out: list[str] = []
    for piece in _pieces(template, what):
        out.append(piece[0])
        if piece[1] is not None:
            _check_field(piece[1], piece[2], values, template, what)
            out.append(_value(piece, values))
    return "".join(out)


def shell_script_index(argv: list[str]) -> int | None:
    """Where the script of a shell's ``-c`` stands in ``argv`` (``env X=1 bash -ec S`` → 3),
    or None when no shell with ``-c`` is run."""
    for i, arg in enumerate(argv):
        if os.path.basename(arg) not in SHELLS:
            continue
        has_c, j = False, i + 1
        while j < len(argv) and argv[j][:1] in "-+" and argv[j] not in ("-", "--"):
            opt = argv[j]
            if opt in ("-o", "+o", "-O", "+O"):
                j += 1  # takes a value
            elif not opt.startswith("--") and "c" in opt[1:]:
                has_c = True
            j += 1
        if j < len(argv) and argv[j] == "--":
            j += 1
        if has_c and j < len(argv):
            return j
        return None
    return None


def render_command(template: str, values: dict[str, Scalar]) -> list[str]:
    """The launch line as argv: split like a shell first, then every value put into its argv
    item as data; in a shell's ``-c`` script, quoted for its context (module doc)."""
    what = "server.command"
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise SpecError(f"sweep {what}: {exc} in {template!r}; balance the quotes") from None
    if not words:
        raise SpecError("sweep server.command is empty: give the server's launch line")
    script = shell_script_index(words)
    argv = [
        _fill_script(w, values, template) if i == script else render(w, values, what=what)
        for i, w in enumerate(words)
    ]
    for arg in argv:
        if "\0" in arg:
            raise SpecError(f"sweep {what}: a value holds a NUL byte, which no argument can")
    return argv


def _fill_script(script: str, values: dict[str, Scalar], template: str) -> str:
    scan = _ScriptScan()
    out: list[str] = []
    for piece in _pieces(script, "server.command"):
        scan.feed(piece[0])
        out.append(piece[0])
        name = piece[1]
        if name is None:
            continue
        _check_field(name, piece[2], values, template, "server.command")
        value = shlex.quote(_value(piece, values))
        unsafe = scan.unsafe_here()
        if unsafe:
            raise SpecError(
                f"sweep server.command: {{{name}}} stands {unsafe} of the shell script, where "
                f"no quoting is safe; {_SAFE_FORM.format(name=name)}"
            )
        top = scan.stack[-1]
        if top == "single":
            value = f"'{value}'"  # close, the quoted value, reopen
        elif top == "double":
            value = f'"{value}"'
        out.append(value)
        scan.after_value()
    return "".join(out)


class _ScriptScan:
    """The quoting context at each point of a POSIX shell script, read piece by piece.

    ``stack`` holds the nested regions (``code`` a command substitution's or the script's own
    text, ``single``, ``double``, ``ansi`` ``$'..'``, ``param`` ``${..}``, ``arith``
    ``$((..))``, ``comment``); ``poison`` is set for the rest of the script once a construct
    makes the context unknowable here (backticks, here-documents, ``case`` inside ``$(..)``).
    """

    def __init__(self) -> None:
        self.stack: list[str] = ["code"]
        self.depth: list[int] = [0]  # open parentheses per region
        self.poison = ""
        self.escaped = False  # the last piece ended in an unpaired backslash
        self.dollar = False  # the last piece ended in a bare $ ($'..' would quote the value)
        self.word_start = True

    def unsafe_here(self) -> str:
        if self.poison:
            return f"after {self.poison}"
        if self.escaped:
            return "right after a backslash"
        top = self.stack[-1]
        if self.dollar and top == "code":
            return "right after a $"
        names = {
            "ansi": "inside $'...'",
            "param": "inside ${...}",
            "arith": "inside an arithmetic $((...))",
            "comment": "inside a comment",
        }
        return names.get(top, "")

    def after_value(self) -> None:
        self.word_start = False

    def _push(self, kind: str) -> None:
        self.stack.append(kind)
        self.depth.append(0)

    def _pop(self) -> None:
        if len(self.stack) > 1:
            self.stack.pop()
            self.depth.pop()

    def feed(self, text: str) -> None:
        self.escaped = self.dollar = False
        i = 0
        while i < len(text) and not self.poison:
            i = self._step(text, i)

    def _step(self, s: str, i: int) -> int:
        top, c = self.stack[-1], s[i]
        if top == "single":
            if c == "'":
                self._pop()
            return i + 1
        if top == "comment":
            if c == "\n":
                self._pop()
                self.word_start = True
            return i + 1
        if c == "\\" and top != "single":
            if i + 1 >= len(s):
                self.escaped = True
            self.word_start = False
            return i + 2
        if top == "ansi":
            if c == "'":
                self._pop()
            return i + 1
        if top in ("param", "arith"):
            return self._step_inner(top, s, i)
        return self._step_code(top, s, i)

    def _step_inner(self, top: str, s: str, i: int) -> int:
        c = s[i]
        if c in "'\"`" or s.startswith("$(", i):
            self.poison = f"quotes or a command inside {'${...}' if top == 'param' else '$((...))'}"
            return i + 1
        opener, closer = ("{", "}") if top == "param" else ("(", ")")
        if c == opener:
            self.depth[-1] += 1
        elif c == closer and self.depth[-1] > 0:
            self.depth[-1] -= 1
        elif c == closer:
            self._pop()
            if top == "arith" and s.startswith(")", i + 1):
                return i + 2
        return i + 1

    def _step_code(self, top: str, s: str, i: int) -> int:
        c = s[i]
        start, self.word_start = self.word_start, c in _WORD_BREAK
        if c == "`":
            self.poison = "a backtick"
        elif top == "double":
            if c == '"':
                self._pop()
            elif c == "$":
                return self._dollar(s, i)
        elif c == "'":
            self._push("single")
        elif c == '"':
            self._push("double")
        elif c == "$":
            return self._dollar(s, i)
        elif c == "#" and start:
            self._push("comment")
        elif s.startswith("<<", i):
            self.poison = "a here-document"
        elif c == "(":
            self.depth[-1] += 1
        elif c == ")":
            if self.depth[-1] > 0:
                self.depth[-1] -= 1
            elif len(self.stack) > 1:
                self._pop()
        elif start and len(self.stack) > 1 and s.startswith("case", i):
            self.poison = "'case' inside $(...)"
        return i + 1

    def _dollar(self, s: str, i: int) -> int:
        self.word_start = False
        if s.startswith("$((", i):
            self._push("arith")
            return i + 3
        if s.startswith("$(", i):
            self._push("code")
            self.word_start = True
            return i + 2
        if s.startswith("${", i):
            self._push("param")
            return i + 2
        if s.startswith("$'", i) and self.stack[-1] != "double":
            self._push("ansi")
            return i + 2
        self.dollar = i + 1 == len(s)
        return i + 1
