"""The mutants: single-point edits of C++ tokens in each Metal source the variants use.

Tokens, not text: comments and preprocessor lines are skipped and template brackets are told
apart from comparisons, so each edit is one place a compiler reads (bench/mutation_score.py's
docstring lists the kinds). Each source is traced back to the one string literal that
defines it, so a mutant is an edit of a file, written into a copy of the tree."""

from __future__ import annotations

import ast
import dataclasses
import difflib
import hashlib
import re
from pathlib import Path

GENERATOR_VERSION = 1  # bump when the mutant generator changes what it produces
VARIANTS_DIR = "kernels/variants"

# -- C++ tokens ---------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<pp>^[ \t]*\#[^\n]*)
  | (?P<space>\s+)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<number>0[xX][0-9a-fA-F]+[uUlL]*
               |(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fFhHuUlL]*)
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<op><<=|>>=|->|::|\+\+|--|&&|\|\||<=|>=|==|!=|<<|>>|\+=|-=|\*=|/=|%=|&=|\|=|\^=
           |[-+*/%<>=!&|^~?:;,.(){}\[\]])
""", re.VERBOSE | re.MULTILINE | re.DOTALL)

# Identifiers that name types: a `*` or `&` after one declares a pointer or a reference.
_TYPES = {"void", "bool", "char", "short", "int", "long", "float", "double", "half", "uint",
          "uint8_t", "uint16_t", "uint32_t", "uint64_t", "int32_t", "size_t", "bfloat",
          "bfloat16_t", "auto", "const", "device", "threadgroup", "thread", "constant", "T"}
_KEYWORDS = {"return", "if", "for", "while", "else", "case", "typename", "template", "using",
             "namespace", "inline", "static", "const"}
# Inside a template argument list only these may appear (besides nested lists).
_TEMPLATE_INNER = {"ident", "number"}
_TEMPLATE_INNER_OPS = {",", "::", "*", "&"}

SWAPS = {"+": "-", "-": "+", "*": "/", "/": "*", "%": "/", "+=": "-=", "-=": "+=", "*=": "/=",
         "/=": "*=", "++": "--", "--": "++", "<": "<=", "<=": "<", ">": ">=", ">=": ">",
         "==": "!=", "!=": "==", "&&": "||", "||": "&&", "<<": ">>", ">>": "<<", "&": "|",
         "|": "&"}
_BINARY_ONLY = {"+", "-", "*", "&", "|", "/", "%"}  # as unary operators these are no swap
KINDS = ("operator", "index", "constant", "barrier", "simd_sum")


@dataclasses.dataclass(frozen=True)
class Token:
    kind: str  # comment, pp, space, string, number, ident, op
    text: str
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.text)


def tokenize(src: str) -> list[Token]:
    """Every character of ``src`` in exactly one token (so offsets are the source's)."""
    out, pos = [], 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if m is None:
            raise ValueError(f"cannot tokenize at offset {pos}: {src[pos:pos + 20]!r}")
        out.append(Token(m.lastgroup, m.group(), pos))
        pos = m.end()
    return out


def code_tokens(src: str) -> list[Token]:
    """The tokens a mutation may touch or look at: no space, comment or preprocessor line."""
    return [t for t in tokenize(src) if t.kind not in ("space", "comment", "pp")]


def _template_brackets(toks: list[Token]) -> set[int]:
    """Indices of ``<`` and ``>`` tokens that delimit template argument lists."""
    marked: set[int] = set()
    for i, t in enumerate(toks):
        if t.text != "<" or i in marked or i == 0 or toks[i - 1].kind != "ident":
            continue
        depth, j, inner = 1, i + 1, [i]
        while j < len(toks) and depth:
            u = toks[j]
            if u.text == "<":
                depth += 1
                inner.append(j)
            elif u.text == ">":
                depth -= 1
                inner.append(j)
            elif u.text == ">>" and depth >= 2:
                depth -= 2
                inner.append(j)
            elif not (u.kind in _TEMPLATE_INNER or u.text in _TEMPLATE_INNER_OPS):
                break
            j += 1
        follows = toks[j].text if j < len(toks) else ""
        if depth == 0 and (follows in {"(", "{", ";", "::", ")", ",", ">"}
                           or (j < len(toks) and toks[j].kind == "ident")):
            marked.update(inner)
    return marked


def _is_operand_end(t: Token) -> bool:
    return (t.kind == "number" or t.text in (")", "]")
            or (t.kind == "ident" and t.text not in _KEYWORDS and t.text not in _TYPES))


def _is_operand_start(t: Token) -> bool:
    return t.kind in ("number", "ident") or t.text in ("(", "!", "~", "-", "+")


def _matching(toks: list[Token], i: int, open_: str, close: str) -> int:
    depth = 0
    for j in range(i, len(toks)):
        depth += toks[j].text == open_
        depth -= toks[j].text == close
        if depth == 0:
            return j
    raise ValueError(f"unbalanced {open_!r} at offset {toks[i].start}")


def _declarator_brackets(toks: list[Token]) -> set[int]:
    """Indices of ``[`` tokens that give an array's size in a declaration, not an index."""
    decl: set[int] = set()
    for i, t in enumerate(toks):
        if t.text != "[" or i < 2:
            continue
        prev = toks[i - 1]
        if prev.text == "]":
            opener = _matching_back(toks, i - 1)
            if opener in decl:
                decl.add(i)
        elif prev.kind == "ident" and (toks[i - 2].kind == "ident"
                                       and toks[i - 2].text not in _KEYWORDS - {"const"}):
            decl.add(i)
    return decl


def _matching_back(toks: list[Token], j: int) -> int:
    depth = 0
    for i in range(j, -1, -1):
        depth += toks[i].text == "]"
        depth -= toks[i].text == "["
        if depth == 0:
            return i
    raise ValueError("unbalanced ']'")


@dataclasses.dataclass(frozen=True)
class Edit:
    """One mutation: replace ``old`` at ``offset`` of the source by ``new``."""

    kind: str
    offset: int
    old: str
    new: str
    what: str  # a few words: "'<' -> '<='"

    def apply(self, src: str) -> str:
        assert src[self.offset:self.offset + len(self.old)] == self.old, self
        return src[:self.offset] + self.new + src[self.offset + len(self.old):]


def _int_text(value: int, like: str) -> str:
    """``value`` written as ``like`` is (hex or decimal, same case, same suffix)."""
    suffix = re.search(r"[uUlL]*$", like).group()
    if like[:2].lower() == "0x":
        digits = f"{value:X}" if any(c in "ABCDEF" for c in like[2:]) else f"{value:x}"
        return like[:2] + digits + suffix
    return f"{value}{suffix}"


def _constant_edits(t: Token) -> list[Edit]:
    text, out = t.text, []
    if re.fullmatch(r"0[xX][0-9a-fA-F]+[uUlL]*", text) or re.fullmatch(r"\d+[uUlL]*", text):
        value = int(re.sub(r"[uUlL]*$", "", text), 0)
        targets = [value + 1]
        if text[:2].lower() == "0x" and value > 1:
            targets.append(value >> 1)
        if 1 <= value <= 64:
            targets.append(0)
        for v in dict.fromkeys(targets):
            new = _int_text(v, text)
            out.append(Edit("constant", t.start, text, new, f"{text} -> {new}"))
    else:  # a floating literal: n -> n + 1 in the same spelling and suffix
        m = re.fullmatch(r"(\d*\.?\d*(?:[eE][+-]?\d+)?)([fFhH]?)", text)
        if m:
            value = float(m.group(1))
            new = f"{value + 1:.1f}{m.group(2)}" if value + 1 == int(value + 1) else None
            if new and new != text:
                out.append(Edit("constant", t.start, text, new, f"{text} -> {new}"))
    return out


def mutants_of(src: str) -> list[Edit]:
    """Every single-point mutant of the Metal source ``src``, in source order, deduplicated."""
    toks = code_tokens(src)
    templates = _template_brackets(toks)
    declarators = _declarator_brackets(toks)
    edits: list[Edit] = []
    for i, t in enumerate(toks):
        prev = toks[i - 1] if i else None
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.kind == "op" and t.text in SWAPS and i not in templates:
            binary = prev is not None and nxt is not None and _is_operand_end(prev) \
                and _is_operand_start(nxt)
            if t.text in _BINARY_ONLY and not binary:
                pass  # unary minus, dereference, address-of, pointer declarator
            else:
                new = SWAPS[t.text]
                edits.append(Edit("operator", t.start, t.text, new, f"'{t.text}' -> '{new}'"))
        if t.kind == "number":
            edits += _constant_edits(t)
        if t.text == "[" and i not in declarators and prev is not None \
                and prev.text != "[" and (nxt is None or nxt.text != "["):
            j = _matching(toks, i, "[", "]")
            if not (j == i + 2 and toks[i + 1].kind == "number"):  # [n]: n -> n+1 covers it
                edits.append(Edit("index", toks[j].start, "]", " + 1]", "index + 1"))
        if t.text == "threadgroup_barrier" and nxt is not None and nxt.text == "(":
            end = toks[_matching(toks, i + 1, "(", ")") + 1]
            if end.text == ";":
                start, stop = t.start, end.end
                line_start = src.rfind("\n", 0, start) + 1
                line_end = src.find("\n", stop)
                line_end = len(src) if line_end < 0 else line_end
                if not src[line_start:start].strip() and not src[stop:line_end].strip():
                    start, stop = line_start, min(line_end + 1, len(src))  # the whole line
                edits.append(Edit("barrier", start, src[start:stop], "",
                                  "barrier removed"))
        if t.text == "simd_sum" and nxt is not None and nxt.text == "(":
            edits.append(Edit("simd_sum", t.start, "simd_sum", "", "simd_sum(e) -> (e)"))
    seen, unique = set(), []
    for e in sorted(edits, key=lambda e: e.offset):
        mutated = e.apply(src)
        if mutated != src and mutated not in seen:
            seen.add(mutated)
            unique.append(e)
    return unique


def differing_tokens(a: str, b: str) -> list[tuple[str, list[str], list[str]]]:
    """The places two sources differ, on code tokens: [(tag, a's tokens, b's tokens)]."""
    ta = [t.text for t in code_tokens(a)]
    tb = [t.text for t in code_tokens(b)]
    sm = difflib.SequenceMatcher(a=ta, b=tb, autojunk=False)
    return [(tag, ta[i1:i2], tb[j1:j2]) for tag, i1, i2, j1, j2 in sm.get_opcodes()
            if tag != "equal"]


# -- the sources and their mutants --------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Source:
    """One distinct Metal source text and the string literal that defines it."""

    key: str  # module.ATTR, e.g. "scalar_kmajor.METAL_SOURCE"
    path: str  # relative to the tree, e.g. "kernels/variants/scalar_kmajor.py"
    text: str
    body_offset: int  # where the literal's text starts in the file
    variants: tuple[str, ...]  # the variants whose METAL_SOURCE or HEADER is this text


def string_literals(path: Path) -> dict[str, tuple[str, int]]:
    """Module-level ``NAME = r\"\"\"...\"\"\"`` assignments: name -> (text, offset in the file)."""
    file_text = path.read_text(encoding="utf-8")
    line_starts = [0]
    for line in file_text.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    found = {}
    for node in ast.parse(file_text).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            continue
        v = node.value
        start = line_starts[v.lineno - 1] + len(
            file_text[line_starts[v.lineno - 1]:].encode()[:v.col_offset].decode())
        literal = file_text[start:]
        m = re.match(r"[rR]?(\"\"\"|''')", literal)
        if not m:
            continue
        body = start + m.end()
        if file_text[body:body + len(v.value)] == v.value:  # raw: the file holds the text
            found[node.targets[0].id] = (v.value, body)
    return found


def metal_sources(tree: Path) -> list[Source]:
    """The distinct Metal texts of the imported variants (``kernels`` must be ``tree``'s)."""
    import kernels
    from kernels.variants import VARIANTS

    assert Path(kernels.__file__).resolve().is_relative_to(tree.resolve()), kernels.__file__
    texts: dict[str, list[str]] = {}
    for name, v in VARIANTS.items():
        if getattr(v, "METAL_SOURCE", None) is None:
            continue
        for attr in ("HEADER", "METAL_SOURCE"):
            text = getattr(v, attr, None)
            if text:
                texts.setdefault(text, []).append(name)
    literals = {}
    for path in sorted((tree / VARIANTS_DIR).glob("*.py")):
        for attr, (text, body) in string_literals(path).items():
            literals.setdefault(text, []).append((path, attr, body))
    out = []
    for text, names in texts.items():
        defs = literals.get(text, [])
        if len(defs) != 1:
            raise RuntimeError(f"a Metal text used by {names} is defined by {len(defs)} "
                               f"literals in {VARIANTS_DIR} (want exactly one)")
        path, attr, body = defs[0]
        out.append(Source(f"{path.stem}.{attr}", str(path.relative_to(tree)), text, body,
                          tuple(sorted(set(names)))))
    return sorted(out, key=lambda s: s.key)


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def mutant_id(src: Source, e: Edit) -> str:
    line, col = _line_col(src.text, e.offset)
    h = hashlib.sha1(f"{src.key}\0{e.offset}\0{e.old}\0{e.new}\0{src.text}".encode())
    return f"{src.key}:{e.kind}:L{line}C{col}:{h.hexdigest()[:6]}"


def build_mutants(tree: Path, sources: list[Source]) -> list[dict]:
    out = []
    for src in sources:
        file_text = (tree / src.path).read_text(encoding="utf-8")
        file_line0 = file_text.count("\n", 0, src.body_offset)
        for e in mutants_of(src.text):
            mutated = e.apply(src.text)
            line, col = _line_col(src.text, e.offset)
            code = src.text.splitlines()[line - 1].strip()
            new_file = (file_text[:src.body_offset] + mutated
                        + file_text[src.body_offset + len(src.text):])
            diff = "".join(difflib.unified_diff(
                file_text.splitlines(keepends=True), new_file.splitlines(keepends=True),
                f"a/{src.path}", f"b/{src.path}", n=1))
            out.append({
                "id": mutant_id(src, e), "source": src.key, "path": src.path,
                "variants": list(src.variants), "kind": e.kind,
                "line": file_line0 + line, "source_line": line, "col": col,
                "old": e.old, "new": e.new,
                "description": f"{src.path}:{file_line0 + line}: {e.what} in `{code}`",
                "diff": diff, "sha": hashlib.sha256(mutated.encode()).hexdigest()[:16],
                "_file": new_file,
            })
    return out
