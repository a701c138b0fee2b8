#!/usr/bin/env python
"""How many single-point mutants of each Metal source does the m8-parity suite kill?

The emulated Apple GPU runs every tuned variant's exact Metal source and holds it against the
portable form; this bench measures how much of each source the suite actually pins down.

1. Mutants. Every distinct Metal source text the variants use (read from the modules: the
   variants' ``METAL_SOURCE`` and ``HEADER``, each traced back to the one string literal that
   defines it) gets single-point mutants, one edit each, made on C++ tokens (comments and
   preprocessor lines skipped, template brackets told apart from comparisons):
   ``operator`` (+ -, * /, % /, += -=, *= /=, ++ --, < <=, > >=, == !=, && ||, << >>, & |),
   ``index`` (`` + 1`` at the end of an index expression), ``constant`` (n -> n+1, n -> 0 for
   1 <= n <= 64, hex n -> n >> 1, 0.0f -> 1.0f), ``barrier`` (one ``threadgroup_barrier(...);``
   deleted) and ``simd_sum`` (``simd_sum(e)`` -> ``(e)``). Ids are stable: source, kind, line,
   column and a hash of the edit.
2. Each mutant is written into a copy of the committed tree (``git archive HEAD``: other
   engineers' uncommitted edits are not what is measured) and compile-checked there: each
   variant it affects is launched once on the emulator at a small shape, stopping after the
   build. A mutant that does not compile is counted apart and left out of the denominator (a
   Mac would refuse it). The rest run the suite on emulated g13s, then g14s, through
   ``farm.runner.device_job.run_job`` itself (the farm's command line, plugins, environment and
   timeouts, PYTHONPATH = the copy; the runner prints ``kernels.__file__`` to prove it), and
   stop at the first failing test: a mutant is killed when either device has one, or when the
   job ends in error or timeout. Two mutants run at once; results are cached in the JSON by
   mutant id (with a digest of the tree), so an interrupted run resumes.
3. A table per source and per variant, bench/results/mutation_score.json and .md; every
   survivor is listed with its diff and a judgement (``JUDGEMENTS`` below): equivalent to the
   original, or which test would kill it. ``--also-suite``/``--also-pytest`` run the JSON's
   survivors through other checks (same mutant ids) and record which kill them.

Never run as a unit test:

    python bench/mutation_score.py [--jobs 2] [--limit N] [--only ID,...] [--fresh]
    python bench/mutation_score.py --commit SHA      # resume a run measured at SHA
    python bench/mutation_score.py --also-suite numeric-bounds --also-pytest "tests/x.py -k y"
    python bench/mutation_score.py --report          # rewrite the report (after judging)
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import contextlib
import dataclasses
import datetime
import difflib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SUITE = "m8-parity"
DEVICES = ("applegpu_g13s", "applegpu_g14s")
GENERATOR_VERSION = 1  # bump when the mutant generator changes what it produces
JOB_TIMEOUT_S = 900.0  # one device's suite run (the farm's default is an hour)
HARD_GRACE_S = 120.0  # past the job timeout, the driver kills the runner itself
VARIANTS_DIR = "kernels/variants"
DIGEST_DIRS = ("kernels", "suites", "devices", "dflash2", "farm", "pyproject.toml")

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


# -- what runs inside a copy of the tree (subprocess, PYTHONPATH = the copy) --------------------

def _runner_compile(job: dict) -> int:
    """Build each variant the mutant affects once (the executor is not entered): 0 if every
    build succeeds, 3 on a CompileError. Prints one JSON line."""
    import mlx.core as mx

    import kernels
    from kernels.metal_emu import executor, toolchain
    from kernels.metal_emu import variant as emulated
    from kernels.qweights import QWeights
    from kernels.variants import VARIANTS

    class Built(Exception):
        pass

    def stop(*_a, **_k):
        raise Built

    executor.launch = stop  # run.run calls executor.launch after the build
    def holds(v) -> bool:
        return any(hashlib.sha256(t.encode()).hexdigest()[:16] == job["sha"]
                   for t in (v.METAL_SOURCE, v.HEADER))

    report = {"kernels": kernels.__file__, "errors": {},
              "mutant_imported": [n for n in job["variants"] if holds(VARIANTS[n])]}
    if report["mutant_imported"] != job["variants"]:
        report["error"] = "the copy's variants do not hold the mutated text"
        print(json.dumps(report))
        return 4
    rc = 0
    for name in job["variants"]:
        v = VARIANTS[name]
        k, n = 1024, 32
        dtype = mx.float16 if name == "fp16_matrix" else mx.bfloat16
        qw = QWeights.quantize(mx.random.normal((n, k), key=mx.random.key(0)) / 32)
        x = mx.random.normal((v.ROWS, k), key=mx.random.key(1)).astype(dtype)
        try:
            emulated.launch(v, x, qw, dict(v.DEFAULTS))
        except Built:
            continue
        except toolchain.CompileError as e:
            report["errors"][name] = str(e)[:2000]
            rc = 3
    print(json.dumps(report))
    return rc


def _runner_suite(job: dict) -> int:
    """The suite on one emulated device through the farm's own device job; stops at the first
    test that fails. Prints the job's events, one JSON object per line."""
    import kernels
    from farm.fleet import shipping
    from farm.runner import device_job

    print(json.dumps({"type": "mutation_runner", "kernels": kernels.__file__,
                      "device_job": device_job.__file__}), flush=True)
    with shipping.as_run_worker(Path.cwd()):  # the mutant's tree, shipped as a run ships it
        gen = device_job.run_job(job["spec"])
        try:
            for batch in gen:
                for ev in batch:
                    print(json.dumps(ev), flush=True)
                if any(_fails(ev) for ev in batch):
                    print(json.dumps({"type": "mutation_runner_stopped"}), flush=True)
                    break
        finally:
            gen.close()  # run_job's finally kills pytest
    return 0


def _fails(ev: dict) -> bool:
    if ev.get("type") != "result":
        return False
    cat = (ev.get("expectation") or {}).get("category")
    return cat in ("unexpected_fail", "crashed") or (
        cat is None and ev.get("outcome") not in ("passed", "skipped"))


# -- the driver ---------------------------------------------------------------------------------

def _snapshot(dest: Path, rev: str = "HEAD") -> str:
    """The committed tree ``rev`` into ``dest``; returns the commit."""
    commit = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return commit


def tree_digest(tree: Path) -> str:
    h = hashlib.sha256(f"generator {GENERATOR_VERSION}\0".encode())
    for top in DIGEST_DIRS:
        p = tree / top
        files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())
        for q in files:
            if "__pycache__" in q.parts:
                continue
            h.update(str(q.relative_to(tree)).encode() + b"\0" + q.read_bytes())
    return h.hexdigest()[:16]


class Slot:
    """One copy of the tree and its own emulator build cache; one mutant at a time."""

    def __init__(self, work: Path, i: int, snapshot: Path, warm_mlx_metal: Path):
        self.tree = work / f"slot{i}" / "tree"
        self.cache = work / f"slot{i}" / "cache"
        shutil.copytree(snapshot, self.tree)
        (self.cache / "metal-emu").mkdir(parents=True)
        (self.cache / "mlx-metal").symlink_to(warm_mlx_metal)
        self.keep: set[str] = set()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.tree)
        env["DFLASH2_EMU_CACHE"] = str(self.cache)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("DFLASH2_DEVICE_ARCH", None)
        return env

    def remember_builds(self) -> None:
        """The builds of the unmutated tree stay; a mutant's are deleted after it."""
        self.keep = {p.name for p in (self.cache / "metal-emu").iterdir()}

    def forget_mutant_builds(self) -> None:
        for p in (self.cache / "metal-emu").iterdir():
            if p.name not in self.keep:
                with contextlib.suppress(OSError):
                    p.unlink()

    def runner(self, mode: str, job: dict, timeout: float) -> tuple[int | None, list[str], str]:
        """Run this script's runner ``mode`` in the copy: (rc or None on timeout, stdout
        lines, stderr tail)."""
        cmd = [sys.executable, str(Path(__file__).resolve()), "--runner", mode, json.dumps(job)]
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(cmd, cwd=self.tree, env=self.env(), stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = None
            out.seek(0)
            err.seek(0)
            return (rc, out.read().decode(errors="replace").splitlines(),
                    err.read().decode(errors="replace")[-3000:])


def _suite_spec(tree: Path, arch: str) -> dict:
    sys.path.insert(0, str(tree))
    from suites.manifest import load_manifest

    suite = load_manifest(tree / "suites" / "manifest.toml")[SUITE]
    return {"suite": SUITE, "pytest_args": suite.pytest_args(),
            "test_timeout": float(suite.timeout), "job_timeout": JOB_TIMEOUT_S,
            "device": {"arch": arch, "emulated": True}, "deselect": [], "attempt": 1, "env": {}}


def run_device(slot: Slot, spec: dict) -> dict:
    """One device's suite run: killed?, why, and the first failures."""
    t0 = time.monotonic()
    rc, lines, err = slot.runner("suite", {"spec": spec}, JOB_TIMEOUT_S + HARD_GRACE_S)
    out: dict = {"device": spec["device"]["arch"], "tests": 0, "failures": [],
                 "selected": [], "status": None}
    for line in lines:
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = ev.get("type")
        if kind == "mutation_runner":
            out["kernels"] = ev["kernels"]
        elif kind == "result":
            out["tests"] += 1
            for s in ev.get("selections") or []:
                if s.get("impl") == "metal-emulated" and s["variant"] not in out["selected"]:
                    out["selected"].append(s["variant"])
            if _fails(ev):
                msg = (ev.get("message") or "").strip().splitlines()
                out["failures"].append({"nodeid": ev["nodeid"], "outcome": ev["outcome"],
                                        "message": (msg[-1] if msg else "")[:400]})
        elif kind == "farm_job_end":
            out["status"] = ev["status"]
            out["error"] = (ev.get("error") or "")[:400] or None
    if rc is None:
        out["status"] = "driver-timeout"
    elif rc != 0 and out["status"] is None:
        out["status"] = f"runner exit {rc}: {err.strip()[-300:]}"
    out["stopped_early"] = any('"mutation_runner_stopped"' in line for line in lines)
    out["killed"] = bool(out["failures"]) or out["status"] not in ("completed",)
    out["wall_s"] = round(time.monotonic() - t0, 2)
    return out


def _first_error(message: str, tree: Path) -> str:
    """The compiler's first ``error:`` line, paths relative to the tree copy."""
    message = message.replace(str(tree) + "/", "")
    line = next((ln for ln in message.splitlines() if "error:" in ln), message.splitlines()[0])
    return " ".join(line.split())[:400]


def run_mutant(slot: Slot, m: dict, specs: dict[str, dict], tree_root: Path) -> dict:
    """Compile-check ``m`` in ``slot``'s copy, then the suite per device until one kills it."""
    t0 = time.monotonic()
    target = slot.tree / m["path"]
    original = target.read_text(encoding="utf-8")
    target.write_text(m["_file"], encoding="utf-8")
    res: dict = {"id": m["id"], "devices": []}
    try:
        rc, lines, err = slot.runner("compile", {"variants": m["variants"], "sha": m["sha"]},
                                     600)
        report = json.loads(lines[-1]) if lines else {}
        res["kernels"] = report.get("kernels")
        if rc == 3:
            res["compiles"] = False
            res["compile_error"] = "; ".join(
                f"{k}: {_first_error(v, slot.tree)}" for k, v in report["errors"].items())
        elif rc != 0:
            raise RuntimeError(f"compile check of {m['id']} failed (rc {rc}): "
                               f"{lines[-1:] or err[-500:]}")
        else:
            res["compiles"] = True
            if not Path(report["kernels"]).is_relative_to(slot.tree):
                raise RuntimeError(f"the copy's kernels were not imported: {report['kernels']}")
            for arch in DEVICES:
                dev = run_device(slot, specs[arch])
                res["devices"].append(dev)
                if not str(dev.get("kernels", "")).startswith(str(slot.tree)):
                    raise RuntimeError(f"suite run imported {dev.get('kernels')}, not the copy")
                if dev["killed"]:
                    break
            res["killed"] = any(d["killed"] for d in res["devices"])
            compile_fail = [f for d in res["devices"] for f in d["failures"]
                            if "does not compile" in f["message"] or "CompileError" in
                            f["message"]]
            if compile_fail and all(
                    f in compile_fail for d in res["devices"] for f in d["failures"]):
                res["compiles"] = False  # compiled at the check's shape, not the suite's
                res["compile_error"] = compile_fail[0]["message"]
    finally:
        target.write_text(original, encoding="utf-8")
        slot.forget_mutant_builds()
    res["wall_s"] = round(time.monotonic() - t0, 2)
    return res


# -- report -------------------------------------------------------------------------------------

def _rate(killed: int, compiling: int) -> str:
    return f"{100.0 * killed / compiling:.1f}%" if compiling else "-"


def summarize(mutants: list[dict], results: dict[str, dict], exercised: dict) -> dict:
    def row(ms: list[dict]) -> dict:
        rs = [results[m["id"]] for m in ms if m["id"] in results]
        compiling = [r for r in rs if r.get("compiles")]
        killed = [r for r in compiling if r.get("killed")]
        equivalent = [r for r in compiling if not r.get("killed")
                      and JUDGEMENTS.get(r["id"], ("", ""))[0] == "equivalent"]
        nonequiv = len(compiling) - len(equivalent)
        return {"mutants": len(ms), "done": len(rs), "compiling": len(compiling),
                "killed": len(killed), "survived": len(compiling) - len(killed),
                "equivalent": len(equivalent), "kill_rate": _rate(len(killed), len(compiling)),
                "kill_rate_non_equivalent": _rate(len(killed), nonequiv)}

    by_source = {s: row([m for m in mutants if m["source"] == s])
                 for s in dict.fromkeys(m["source"] for m in mutants)}
    variants = sorted({v for m in mutants for v in m["variants"]})
    by_variant = {v: {**row([m for m in mutants if v in m["variants"]]),
                      "exercised_on": [a for a in DEVICES if v in exercised.get(a, [])]}
                  for v in variants}
    by_kind = {k: row([m for m in mutants if m["kind"] == k]) for k in KINDS}
    return {"by_source": by_source, "by_variant": by_variant, "by_kind": by_kind,
            "total": row(mutants)}


def _table(title: str, rows: dict[str, dict], extra: str | None = None) -> list[str]:
    head = f"| {title} | mutants | compiling | killed | survived | equivalent | kill rate | " \
           f"kill rate (non-equivalent) |" + (f" {extra} |" if extra else "")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, r in rows.items():
        cells = [name, r["mutants"], r["compiling"], r["killed"], r["survived"],
                 r["equivalent"], r["kill_rate"], r["kill_rate_non_equivalent"]]
        if extra:
            cells.append(", ".join(r.get("exercised_on") or []) or "not run by m8-parity")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def write_report(out: dict, mutants: list[dict], results: dict[str, dict]) -> str:
    s = out["summary"]
    lines = ["# Mutation score of the Metal sources under m8-parity", "",
             (f"{out['date']}; tree {out['commit'][:12]} (`git archive HEAD`); "
             f"{out['host']['cpus']} CPUs, {out['jobs']} mutants at a time. Suite `{SUITE}` on "
             f"emulated {' and '.join(DEVICES)} through `farm.runner.device_job.run_job` (stopping "
             f"at the first failing test); a mutant is killed when either device fails a test "
             f"or ends its job in error or timeout. Mutants that do not compile are counted "
             f"apart and are not in the denominator."), "",
             (f"Wall time of the run that measured them: {out['measured_wall_s']:.0f} s "
             f"({out['measured_wall_s'] / 60:.1f} min) for {out['measured_mutants']} mutants "
             f"(sum over mutants {out['mutant_seconds']:.0f} s). "
             f"Command: `{out.get('measured_command', out['command'])}`."), "",
             "## Per source", ""]
    lines += _table("source", s["by_source"])
    lines += ["", ("## Per variant (a mutant counts for every variant whose source or header it "
              "changes)"), ""]
    lines += _table("variant", s["by_variant"], "selected (metal-emulated) by m8-parity on")
    lines += ["", "## Per mutation kind", ""]
    lines += _table("kind", s["by_kind"])
    t = s["total"]
    lines += ["", (f"**Total: {t['killed']} of {t['compiling']} compiling mutants killed "
              f"({t['kill_rate']}); {t['mutants'] - t['compiling']} of {t['mutants']} do not "
              f"compile; {t['equivalent']} survivors judged equivalent "
              f"({t['kill_rate_non_equivalent']} of the non-equivalent ones killed).**"), ""]
    survivors = [m for m in mutants if results.get(m["id"], {}).get("compiles")
                 and not results[m["id"]].get("killed")]
    lines += [f"## Survivors ({len(survivors)})", ""]
    for label, meta in (out.get("also") or {}).items():
        n = sum(bool((results[m["id"]].get("also") or {}).get(label, {}).get("killed"))
                for m in survivors)
        lines.append(f"- `{label}` kills {n} of them (tree {meta['commit'][:12]}, run by "
                     f"`{meta['command']}`" + (f" in {meta['wall_s']:.0f} s)." if "wall_s" in meta
                                                else ")."))
    if survivors:
        judged = [JUDGEMENTS.get(m["id"], ("not judged", ""))[0] for m in survivors]
        others = [m for m, v in zip(survivors, judged) if v != "equivalent"]
        caught = [m for m in others if any(
            v.get("killed") for v in (results[m["id"]].get("also") or {}).values())]
        lines.append(f"- {judged.count('equivalent')} judged equivalent, {len(others)} not; "
                     + (f"{len(caught)} of those {len(others)} are killed by at least one "
                        f"other check." if out.get("also") else "no other check was run."))
    lines += [""]
    for m in survivors:
        verdict, why = JUDGEMENTS.get(m["id"], ("not judged", ""))
        lines += [f"### `{m['id']}`", "", f"- {m['description']}",
                  f"- variants: {', '.join(m['variants'])}",
                  f"- judgement: **{verdict}**" + (f": {why}" if why else "")]
        for label, v in (results[m["id"]].get("also") or {}).items():
            lines.append(f"- {label}: " + (f"**killed** ({v['why']})" if v["killed"]
                                           else "survives"))
        lines += ["",
                  "```diff", m["diff"].rstrip("\n"), "```", ""]
    nc = [m for m in mutants if results.get(m["id"], {}).get("compiles") is False]
    lines += [f"## Not compiling ({len(nc)})", "",
              "| id | edit | compiler says |", "|---|---|---|"]
    for m in nc:
        first = results[m["id"]].get("compile_error", "")[:200].replace("|", "\\|")
        lines.append(f"| `{m['id']}` | `{m['old'].strip()[:40]}` -> "
                     f"`{m['new'].strip()[:40]}` | {first} |")
    return "\n".join(lines) + "\n"


def _print_tables(summary: dict) -> None:
    for title, key in (("source", "by_source"), ("variant", "by_variant"), ("kind", "by_kind")):
        print(f"\n{title:24s} {'mutants':>8s} {'compile':>8s} {'killed':>7s} {'surv':>5s} "
              f"{'equiv':>6s} {'rate':>7s} {'rate*':>7s}")
        for name, r in summary[key].items():
            print(f"{name:24s} {r['mutants']:8d} {r['compiling']:8d} {r['killed']:7d} "
                  f"{r['survived']:5d} {r['equivalent']:6d} {r['kill_rate']:>7s} "
                  f"{r['kill_rate_non_equivalent']:>7s}")
    t = summary["total"]
    print(f"\ntotal: {t['killed']}/{t['compiling']} compiling mutants killed ({t['kill_rate']});"
          f" rate* = without survivors judged equivalent: {t['kill_rate_non_equivalent']}")


def _load_json(path: Path) -> dict:
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        return json.loads(path.read_text())
    return {}


def also_run(slot: Slot, label: str, spec: dict | None, pytest_args: list[str] | None) -> dict:
    """One extra check of the copy in ``slot``: a farm suite on both emulated devices, or plain
    pytest in the copy. Killed when anything fails."""
    if spec is not None:
        for arch in DEVICES:
            dev = run_device(slot, {**spec, "device": {"arch": arch, "emulated": True}})
            if dev["killed"]:
                f = dev["failures"][0] if dev["failures"] else {"nodeid": dev["status"],
                                                                "message": dev.get("error")}
                return {"killed": True, "why": f"{arch}: {f['nodeid']}: {f['message']}"[:400]}
        return {"killed": False, "why": ""}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           "-o", "addopts=", *pytest_args]
    env = slot.env()
    try:
        r = subprocess.run(cmd, cwd=slot.tree, env=env, capture_output=True, text=True,
                           timeout=JOB_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"killed": True, "why": f"timeout after {JOB_TIMEOUT_S:g} s"}
    if r.returncode not in (0, 1):
        raise RuntimeError(f"{label}: pytest exit {r.returncode}: {r.stdout[-800:]}")
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return {"killed": r.returncode == 1, "why": (failed[0] if failed else "")[:400]}


def _also_checks(args, snapshot: Path) -> list[tuple[str, dict | None, list[str] | None]]:
    checks = []
    for name in args.also_suite or []:
        spec = _suite_spec(snapshot, DEVICES[0])
        from suites.manifest import load_manifest

        suite = load_manifest(snapshot / "suites" / "manifest.toml")[name]
        checks.append((f"suite {name}", {**spec, "suite": name,
                                         "pytest_args": suite.pytest_args(),
                                         "test_timeout": float(suite.timeout)}, None))
    for text in args.also_pytest or []:
        checks.append((f"pytest {text}", None, shlex.split(text)))
    return checks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="mutants run at once")
    ap.add_argument("--commit", default="HEAD", help="the committed tree to measure")
    ap.add_argument("--limit", type=int, default=None, help="only the first N mutants (a try)")
    ap.add_argument("--only", default=None,
                    help="only mutants whose id contains one of these (comma-separated)")
    ap.add_argument("--fresh", action="store_true", help="ignore cached results")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--report", action="store_true",
                    help="only rewrite the report from the JSON (e.g. after judging survivors)")
    ap.add_argument("--also-suite", action="append", metavar="SUITE",
                    help="run the JSON's survivors through this farm suite too (both devices)")
    ap.add_argument("--also-pytest", action="append", metavar="ARGS",
                    help="run the JSON's survivors through plain pytest ARGS in the copy too")
    ap.add_argument("--runner", choices=("compile", "suite"), help=argparse.SUPPRESS)
    ap.add_argument("job", nargs="?", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.runner:
        job = json.loads(args.job)
        return _runner_compile(job) if args.runner == "compile" else _runner_suite(job)

    started = time.monotonic()
    json_path, md_path = RESULTS / "mutation_score.json", RESULTS / "mutation_score.md"
    cached = _load_json(json_path)
    command = "python bench/mutation_score.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    if args.report:
        if not cached:
            print(f"no {json_path.relative_to(ROOT)} to report from", file=sys.stderr)
            return 2
        cached["summary"] = summarize(cached["mutants"], cached["results"], cached["exercised"])
        cached["judgements"] = {k: {"verdict": v[0], "why": v[1]} for k, v in JUDGEMENTS.items()
                                if k in cached["results"]}
        json_path.write_text(json.dumps(cached, indent=1) + "\n")
        md_path.write_text(write_report(cached, cached["mutants"], cached["results"]))
        _print_tables(cached["summary"])
        return 0
    with tempfile.TemporaryDirectory(prefix="mutation-score-") as work_s:
        work = Path(work_s)
        snapshot = work / "snapshot"
        commit = _snapshot(snapshot, args.commit)
        sys.path.insert(0, str(snapshot))  # kernels, suites: the snapshot's, not the checkout's
        sources = metal_sources(snapshot)
        mutants = build_mutants(snapshot, sources)
        digest = tree_digest(snapshot)
        print(f"tree {commit[:12]} (digest {digest}); {len(mutants)} mutants of "
              f"{len(sources)} Metal sources:", flush=True)
        for src in sources:
            n = sum(m["source"] == src.key for m in mutants)
            print(f"  {src.key:32s} {n:4d} mutants -> {', '.join(src.variants)}")
        if args.list:
            for m in mutants:
                print(f"{m['id']:60s} {m['description'][:100]}")
            return 0
        checks = _also_checks(args, snapshot)
        if checks:
            return _run_also(args, cached, mutants, checks, commit, work, snapshot, json_path,
                             md_path, started)
        if cached and not args.fresh and cached.get("tree_digest") != digest:
            print(f"{json_path.relative_to(ROOT)} holds results for tree "
                  f"{cached.get('commit', '?')[:12]}, not this one: --commit "
                  f"{cached.get('commit', '?')[:12]} resumes it, --fresh starts over",
                  file=sys.stderr)
            return 2
        cache = {} if args.fresh else cached
        results: dict[str, dict] = dict(cache.get("results", {}))
        todo = [m for m in mutants if m["id"] not in results]
        if args.only:
            wanted = args.only.split(",")
            todo = [m for m in todo if any(w in m["id"] for w in wanted)]
        if args.limit is not None:
            todo = todo[:args.limit]
        print(f"{len(results)} cached, {len(todo)} to run", flush=True)
        slots = _slots(work, snapshot, args.jobs)
        specs = {arch: _suite_spec(snapshot, arch) for arch in DEVICES}
        lock = threading.Lock()
        exercised = dict(cache.get("exercised", {}))
        runs = list(cache.get("runs", []))

        def save(final: bool = False) -> dict:
            done = [m for m in mutants if m["id"] in results]
            out = {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "suite": SUITE, "devices": list(DEVICES), "commit": commit,
                "tree_digest": digest, "generator_version": GENERATOR_VERSION,
                "jobs": args.jobs, "command": command,
                "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                "job_timeout_s": JOB_TIMEOUT_S, "exercised": exercised, "runs": runs,
                "sources": [{"key": s.key, "path": s.path, "variants": list(s.variants),
                             "mutants": sum(m["source"] == s.key for m in mutants)}
                            for s in sources],
                "summary": summarize(done, results, exercised),
                "mutants": [{k: v for k, v in m.items() if not k.startswith("_")}
                            for m in mutants],
                "results": results,
                "judgements": {k: {"verdict": v[0], "why": v[1]} for k, v in JUDGEMENTS.items()
                               if k in results},
                "also": cache.get("also", {}),
            }
            measured = max(runs, key=lambda r: r["mutants_run"], default=None)
            out["measured_wall_s"] = measured["wall_s"] if measured else 0.0
            out["measured_mutants"] = measured["mutants_run"] if measured else 0
            out["measured_command"] = measured.get("command", command) if measured else command
            out["mutant_seconds"] = round(sum(r.get("wall_s", 0) for r in results.values()), 1)
            RESULTS.mkdir(parents=True, exist_ok=True)
            tmp = json_path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(out, indent=1) + "\n")
            os.replace(tmp, json_path)
            if final:
                md_path.write_text(write_report(out, mutants, results))
            return out

        # The unmutated tree first, on both devices: it must pass (else nothing is measured),
        # it says which variants the suite runs where, and its builds stay in each slot's cache.
        bases = _in_slots(slots, lambda slot: [run_device(slot, specs[a]) for a in DEVICES])
        for i, (slot, per_device) in enumerate(zip(slots, bases)):
            for base in per_device:
                arch = base["device"]
                if base["killed"] or not str(base.get("kernels")).startswith(str(slot.tree)):
                    print(f"the unmutated tree fails {SUITE} on {arch}: "
                          f"{base['status']} {base['failures'][:3]}", file=sys.stderr)
                    return 1
                exercised[arch] = base["selected"]
                print(f"baseline {arch} (slot {i}): {base['tests']} tests passed in "
                      f"{base['wall_s']:.1f} s; Metal variants run: "
                      f"{', '.join(base['selected'])}", flush=True)
            slot.remember_builds()

        t_run = time.monotonic()
        for n, (m, r) in enumerate(_pool(slots, todo, lambda slot, m: run_mutant(
                slot, m, specs, snapshot)), 1):
            with lock:
                results[m["id"]] = r
                save()
            state = ("no-compile" if not r["compiles"] else
                     "KILLED" if r["killed"] else "survived")
            why = ""
            if r.get("killed"):
                d = next(d for d in r["devices"] if d["killed"])
                f = d["failures"][0] if d["failures"] else {"nodeid": d["status"],
                                                            "message": d.get("error")}
                why = f"{d['device']}: {f['nodeid'].split('::')[-1]}: {f['message'][:90]}"
            print(f"[{n}/{len(todo)} {time.monotonic() - t_run:6.0f}s] "
                  f"{m['id']:58s} {state:10s} {r['wall_s']:5.1f}s {why}", flush=True)
        runs.append({"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                     "mutants_run": len(todo), "wall_s": round(time.monotonic() - started, 1),
                     "command": command})
        out = save(final=True)
    _print_tables(out["summary"])
    print(f"\nwrote {json_path.relative_to(ROOT)} and {md_path.relative_to(ROOT)}; "
          f"this invocation {time.monotonic() - started:.0f} s")
    return 0


def _slots(work: Path, snapshot: Path, jobs: int) -> list[Slot]:
    from kernels.metal_emu import mlx_metal

    warm = mlx_metal.extracted()  # MLX's Metal sources: fetched once, shared by the slots
    return [Slot(work, i, snapshot, warm) for i in range(max(1, jobs))]


def _in_slots(slots: list[Slot], fn) -> list:
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(slots)) as pool:
        return list(pool.map(fn, slots))


def _pool(slots: list[Slot], items: list[dict], fn):
    """(item, fn(slot, item)) as each finishes, one item per free slot at a time."""
    free, lock = list(slots), threading.Lock()

    def one(item: dict):
        with lock:
            slot = free.pop()
        try:
            return fn(slot, item)
        finally:
            with lock:
                free.append(slot)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(slots)) as pool:
        futures = {pool.submit(one, item): item for item in items}
        for fut in concurrent.futures.as_completed(futures):
            yield futures[fut], fut.result()


def _run_also(args, cached: dict, mutants: list[dict], checks, commit: str, work: Path,
              snapshot: Path, json_path: Path, md_path: Path, started: float) -> int:
    """The JSON's m8-parity survivors through other checks (same mutant ids, this tree)."""
    results = cached.get("results", {})
    survivors = {i for i, r in results.items() if r.get("compiles") and not r.get("killed")}
    todo = [m for m in mutants if m["id"] in survivors]
    if args.only:
        todo = [m for m in todo if any(w in m["id"] for w in args.only.split(","))]
    missing = survivors - {m["id"] for m in mutants}
    if missing:
        print(f"{len(missing)} survivors are not mutants of this tree (source changed): "
              f"{sorted(missing)}", file=sys.stderr)
    slots = _slots(work, snapshot, args.jobs)
    for label, spec, pytest_args in checks:
        base = also_run(slots[0], label, spec, pytest_args)
        if base["killed"]:
            print(f"{label} fails on the unmutated tree: {base['why']}", file=sys.stderr)
            return 1
        print(f"baseline {label}: passes", flush=True)
    also = cached.setdefault("also", {})
    for label, spec, pytest_args in checks:
        also[label] = {"commit": commit, "command": "python bench/mutation_score.py "
                       + shlex.join(sys.argv[1:]),
                       "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}

    def run(slot: Slot, m: dict) -> dict:
        target = slot.tree / m["path"]
        original = target.read_text(encoding="utf-8")
        target.write_text(m["_file"], encoding="utf-8")
        try:
            return {label: also_run(slot, label, spec, pytest_args)
                    for label, spec, pytest_args in checks}
        finally:
            target.write_text(original, encoding="utf-8")
            slot.forget_mutant_builds()

    for n, (m, r) in enumerate(_pool(slots, todo, run), 1):
        results[m["id"]].setdefault("also", {}).update(r)
        json_path.write_text(json.dumps(cached, indent=1) + "\n")
        print(f"[{n}/{len(todo)}] {m['id']:58s} " + "; ".join(
            f"{label}: {'KILLED' if v['killed'] else 'survived'} {v['why'][:80]}"
            for label, v in r.items()), flush=True)
    for label, *_ in checks:
        also[label]["wall_s"] = round(time.monotonic() - started, 1)
        also[label]["mutants_run"] = len(todo)
    cached["summary"] = summarize(cached["mutants"], results, cached["exercised"])
    json_path.write_text(json.dumps(cached, indent=1) + "\n")
    md_path.write_text(write_report(cached, cached["mutants"], results))
    print(f"this invocation {time.monotonic() - started:.0f} s")
    return 0


# -- survivors, judged by reading the source (id -> (verdict, why)) -----------------------------

_ROW = ("one more row of threadgroup memory that nothing touches; the row length (8), which "
        "the matrix load/store stride and the [i][j] indexing depend on, is unchanged")
_BROADCAST = ("simd_sum returns the SIMD group's total to every lane, so lane 1 (or lanes "
              "1-31, each with that same value) stores exactly what lane 0 stored")
_STRIDE_K1 = ("equivalent for narrow_output and for verify_m16 at k_groups 2 (every output is "
              "written in the first pass), not at k_groups 1 (64 outputs over 32 lanes): the "
              "second pass misses output 32 (stride 33) or never runs (-=, the index wraps). "
              "m8-parity's M = 16 test and numeric-bounds run verify_m16 only at k_groups 2 "
              "(production shapes); the k_groups 1 tiling (the e2e model's tiny_* shapes) is "
              "killed by tests/test_metal_launches.py (verify_m16 rows) and the sanitizer test")

JUDGEMENTS: dict[str, tuple[str, str]] = {
    "_metal_common.SPLIT_K_BODY:operator:L26C16:9fda35": ("equivalent", _BROADCAST),
    "_metal_common.SPLIT_K_BODY:constant:L26C19:183974": ("equivalent", _BROADCAST),
    "_metal_common.SPLIT_K_BODY:constant:L29C58:bfd68b": ("not equivalent", _STRIDE_K1),
    "_metal_common.SPLIT_K_BODY:operator:L29C55:1726d6": ("not equivalent", _STRIDE_K1),
    "_metal_common.SPLIT_K_BODY:operator:L29C61:2b0f85": (
        "equivalent", ("the write-back stride only shrinks (32 / K_GROUPS >= 1: K_GROUPS <= 32 "
        "under the 1024-thread limit) while the start indices g * 32 + lane still cover "
        "[0, 32 * K_GROUPS), so every output is written, some several times, always with the "
        "same in-order sum")),
    "fp16_matrix.METAL_SOURCE:constant:L2C23:8381a6": (
        "not equivalent", ("a zero-length threadgroup array: every wt[j][lane] store lands past "
        "it, in memory that `out` uses only after the loop, so every output is still right. "
        "The executor bounds threadgroup memory as one section, and clang's array-bounds check "
        "(which the emulator builds with since 6191360) takes a zero-length array for a "
        "flexible array member and does not check it. Killed by tests/test_metal_mutants.py::"
        "test_metal_source_is_clean_under_sanitizers, built with -fstrict-flex-arrays=3")),
    "fp16_matrix.METAL_SOURCE:constant:L2C23:a0121c": ("equivalent", _ROW),
    "fp16_matrix.METAL_SOURCE:barrier:L18C1:a8a6cf": (
        "equivalent", ("the loop's second barrier orders this iteration's reads of wt "
        "(simdgroup_load) before the next iteration's stores; the "
        "simdgroup_multiply_accumulate between them is a SIMD-group collective that consumes "
        "every lane's loaded fragment, so no lane reaches the next stores before every lane has "
        "loaded, and fp16_matrix's threadgroup is one SIMD group (32 threads, k_groups fixed at "
        "1): the barrier is redundant there (it would not be with two SIMD groups)")),
    "fp16_matrix.METAL_SOURCE:constant:L20C25:bcfe72": ("equivalent", _ROW),
    "scalar_kmajor.METAL_SOURCE:constant:L10C22:72d88f": (
        "equivalent", ("one column more of the thread-private xv, of which only [m][0..7] is "
        "written and read through the same array type")),
    "scalar_kmajor.METAL_SOURCE:operator:L23C16:a6c4ea": ("equivalent", _BROADCAST),
    "scalar_kmajor.METAL_SOURCE:constant:L23C19:725708": ("equivalent", _BROADCAST),
}

if __name__ == "__main__":
    sys.exit(main())
