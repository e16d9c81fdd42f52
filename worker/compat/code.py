"""What Python code needs from the device, read from its syntax tree (never run).

One pass per file collects evidence (report.KINDS) with file:line, and every
import, so that an extension a build makes (`CUDAExtension("quant_cuda", ...)`)
can be matched to the code that imports it (`worker/compat/__init__.py`).

Guarded: an import inside try/if or inside a function (a path the code may not
take), a device string or `.cuda()` under a test that names CUDA or a device,
a dtype under any test (a choice among dtypes). A guarded need is reported but
blocks no device: the code has another way.
"""
from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass

from worker.compat import report as r
from worker.compat.report import Evidence, Unread

# Import names -> the device library they are (rules and sources: bot/fits/compat.py).
LIBRARIES = {"triton": "triton", "flash_attn": "flash_attn", "flash_attn_interface": "flash_attn_3",
             "flash_attn_3": "flash_attn_3", "xformers": "xformers",
             "bitsandbytes": "bitsandbytes", "vllm": "vllm", "apex": "apex",
             "deepspeed.ops": "deepspeed_ops", "transformer_engine": "transformer_engine"}
CUDA_STRING = re.compile(r"^cuda(:\d+)?$")
ARCH = re.compile(r"\b(?:sm|compute)_(\d{2,3})a?\b")
DEVICE_WORDS = ("cuda", "device", "gpu", "is_available", "mps")
# A test that chooses a dtype, or whether to use FlashAttention.
DTYPE_WORDS = ("dtype", "bf16", "bfloat", "precision", "fp16", "half", "fp8", "float8",
               "capability", "is_bf16_supported", "amp")
FLASH_WORDS = ("flash", "attn", "capability", "is_available", "cuda", "device")
PATCHES_FA2 = "patches FlashAttention2"
TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
# Text without which a statement holds no evidence: each thing Scan looks for names one
# of these. A file, or a top-level statement or method, without any is parsed (a syntax
# error is still named) but not walked: most of a vendored library has none. Plain
# substrings, not one regular expression: `in` and `find` are many times faster here.
CLUES = tuple(dict.fromkeys(name.split(".")[0] for name in LIBRARIES)) + (
    "cuda", "CUDAExtension", ".cu", "FlashAttention2", "flash_attention_2", "import_module",
    "__import__", "fp8", "bf16", "bfloat16", "float8_", "mps", "hip")
ARCH_CLUES = ("sm_", "compute_")  # only in a build's file (see _arch)
BUILDS = ("CUDAExtension", ".cu")  # a file that may build a CUDA extension
LINE_END = re.compile(r"\r\n|\r|\n")  # as Python's tokenizer counts lines


def clues(built: tuple[str, ...] = ()) -> tuple[str, ...]:
    """CLUES, and the modules the repository's own builds make (their imports count)."""
    return CLUES + built


def _offsets(text: str, words: tuple[str, ...]) -> list[int]:
    """Where each of `words` starts in `text`, sorted."""
    out: list[int] = []
    for word in words:
        at = text.find(word)
        while at >= 0:
            out.append(at)
            at = text.find(word, at + 1)
    return sorted(out)


@dataclass(frozen=True)
class Imported:
    module: str    # dotted, as written ("flash_attn.bert_padding")
    file: str
    line: int
    guarded: bool


class Scan(ast.NodeVisitor):
    """One file's evidence, imports and what it could not read."""

    def __init__(self, rel: str, text: str = "") -> None:
        self.rel = rel
        self.clues: list[int] | None = None  # where clues are; None: walk every statement
        self.starts: list[int] = []          # each line's offset in the text
        self.patches = "FlashAttention2" in text
        self.found: list[Evidence] = []
        self.imports: list[Imported] = []
        self.unread: list[Unread] = []
        self.tests: list[ast.expr] = []  # the enclosing if/while tests
        self.tries = 0
        self.functions = 0
        self.builds = False          # the file builds an extension: its arch flags count
        self.test = bool(TEST_FILE.search(rel))  # a test's needs are on the tests' path only

    def add(self, kind: str, detail: str, node: ast.AST, guarded: bool = False) -> None:
        self.found.append(Evidence(kind, detail, self.rel, getattr(node, "lineno", 0),
                                   guarded or self.test))

    def guard(self, words: tuple[str, ...] = DEVICE_WORDS) -> bool:
        # Unparsed only here: most tests enclose no evidence.
        tests = [ast.unparse(t).lower() for t in self.tests]
        return any(w in t for t in tests for w in words)

    # -- what is walked ----------------------------------------------------------------
    def visit_Module(self, node: ast.Module) -> None:
        self._body(node.body)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for part in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(part)
        self._body(node.body)

    def _body(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if self.clues is None or self._has_clue(stmt):
                self.visit(stmt)

    def _has_clue(self, stmt: ast.stmt) -> bool:
        """A clue within the statement's lines, its decorators included."""
        assert self.clues is not None
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", ())])
        end = min(stmt.end_lineno or len(self.starts), len(self.starts) - 1)
        at = bisect.bisect_left(self.clues, self.starts[first - 1])
        return at < len(self.clues) and self.clues[at] < self.starts[end]

    # -- scopes ------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions += 1
        self.generic_visit(node)
        self.functions -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Try(self, node: ast.Try) -> None:
        self.tries += 1
        for stmt in node.body:
            self.visit(stmt)
        self.tries -= 1
        rest: list[ast.AST] = [*node.handlers, *node.orelse, *node.finalbody]
        for child in rest:
            self.visit(child)

    visit_TryStar = visit_Try

    def visit_If(self, node: ast.If | ast.While) -> None:
        self.visit(node.test)
        self.tests.append(node.test)
        for child in [*node.body, *node.orelse]:
            self.visit(child)
        self.tests.pop()

    visit_While = visit_If

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.visit(node.test)
        self.tests.append(node.test)
        self.visit(node.body)
        self.visit(node.orelse)
        self.tests.pop()

    # -- imports -----------------------------------------------------------------------
    def _imported(self, module: str, node: ast.AST) -> None:
        guarded = bool(self.tries or self.tests or self.functions or self.test)
        self.imports.append(Imported(module, self.rel, getattr(node, "lineno", 0), guarded))
        for name, lib in LIBRARIES.items():
            if module == name or module.startswith(name + "."):
                self.add(r.IMPORT, lib, node, guarded)
                return

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._imported(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return  # a relative import: the repository's own code
        self._imported(node.module, node)
        for alias in node.names:  # `from deepspeed import ops`
            self._imported(f"{node.module}.{alias.name}", node)

    # -- calls, attributes, strings ------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "cuda" and isinstance(func, ast.Attribute) \
                and ast.unparse(func.value) != "torch":
            self.add(r.CUDA_CALL, ".cuda()", node, self.guard())
        elif name in ("CUDAExtension", "load", "load_inline"):
            self._extension(name, node)
        elif name in ("import_module", "__import__"):
            self._dynamic(node)
        elif name == "fp8_autocast":
            self.add(r.FP8, "fp8_autocast", node, self.guard(DTYPE_WORDS))
        self._keywords(node)
        self.generic_visit(node)

    def _keywords(self, node: ast.Call) -> None:
        for kw in node.keywords:
            value = kw.value.value if isinstance(kw.value, ast.Constant) else None
            if kw.arg == "attn_implementation" and value == "flash_attention_2":
                self.add(r.FA2_REQUEST, "attn_implementation=flash_attention_2", kw.value,
                         self.guard(FLASH_WORDS))
            elif kw.arg == "use_flash_attention_2" and value is True:
                self.add(r.FA2_REQUEST, "use_flash_attention_2=True", kw.value,
                         self.guard(FLASH_WORDS))
            elif kw.arg == "bf16" and value is True:
                self.add(r.BF16, "bf16=True", kw.value, self.guard(DTYPE_WORDS))
            elif kw.arg in ("torch_dtype", "dtype") and value in ("bfloat16", "bf16"):
                self.add(r.BF16, f"{kw.arg}={value!r}", kw.value, self.guard(DTYPE_WORDS))

    def _extension(self, name: str, node: ast.Call) -> None:
        args = [a.value for a in node.args if isinstance(a, ast.Constant)]
        kwargs = {k.arg: k.value for k in node.keywords}
        sources = ast.unparse(kwargs["sources"]) if "sources" in kwargs else ast.unparse(node)
        if name != "CUDAExtension" and ".cu" not in sources:
            return  # a C++-only build (CppExtension's load): no CUDA in it
        target = kwargs.get("name")
        built = target.value if isinstance(target, ast.Constant) else (args[0] if args else "")
        self.builds = True
        self.add(r.EXTENSION, str(built).rsplit(".", 1)[-1], node)

    def _dynamic(self, node: ast.Call) -> None:
        first = node.args[0] if node.args else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            self._imported(first.value, node)
        else:
            self.unread.append(Unread(self.rel, node.lineno, "dynamic_import",
                                      ast.unparse(node)[:120]))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr, parent = node.attr, getattr(node.value, "attr", getattr(node.value, "id", ""))
        if attr == "bfloat16":
            self.add(r.BF16, ast.unparse(node), node, self.guard(DTYPE_WORDS))
        elif attr.startswith("float8_"):
            self.add(r.FP8, ast.unparse(node), node, self.guard(DTYPE_WORDS))
        elif attr == "mps" and parent == "backends":
            self.add(r.MPS, ast.unparse(node), node)
        elif attr == "hip" and parent == "version":
            self.add(r.ROCM, ast.unparse(node), node)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        # `LlamaFlashAttention2.forward = my_forward`: the method is written into
        # FlashAttention-2's own path, so without FlashAttention-2 it does not run.
        for target in node.targets if self.patches else ():
            if "FlashAttention2" in getattr(target, "attr", "") + ast.unparse(target):
                self.add(r.FA2_REQUEST, PATCHES_FA2, node, self.guard(FLASH_WORDS))
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if "cuda.is_available" in ast.unparse(node.test):
            self.add(r.CUDA_ASSERT, "assert torch.cuda.is_available()", node)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        # `device.type == "cuda"` reads the device, it does not choose it; but a test
        # for "mps" is the code knowing the Mac.
        # A dtype compared (`x.dtype == torch.bfloat16`) is read, not used.
        for part in [node.left, *node.comparators]:
            if isinstance(part, ast.Constant) and part.value == "mps":
                self.add(r.MPS, "'mps'", part)
            elif not isinstance(part, (ast.Constant, ast.Tuple, ast.List, ast.Set)) and not (
                    isinstance(part, ast.Attribute)
                    and part.attr.startswith(("bfloat16", "float8_"))):
                self.visit(part)

    def visit_List(self, node: ast.List | ast.Tuple | ast.Set) -> None:
        # A list of choices (`choices=["cuda", "cpu"]`) names devices, it picks none.
        for elt in node.elts:
            if not isinstance(elt, ast.Constant):
                self.visit(elt)
            elif isinstance(elt.value, str):
                self._arch(elt)  # a list of nvcc flags does name arches

    visit_Tuple = visit_Set = visit_List

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str):
            return
        if CUDA_STRING.match(node.value):
            self.add(r.CUDA_DEVICE, repr(node.value), node, self.guard())
        elif node.value == "mps" or node.value.startswith("mps:"):
            self.add(r.MPS, repr(node.value), node)
        else:
            self._arch(node)

    def _arch(self, node: ast.Constant) -> None:
        """`sm_80`, `compute_90a` in a build's flags: the kernels' lowest arch."""
        if isinstance(node.value, str) and (self.builds or "setup" in self.rel):
            for m in ARCH.finditer(node.value):
                digits = m.group(1)
                self.add(r.CUDA_ARCH, f"{digits[:-1]}.{digits[-1]}", node)


def scan(rel: str, text: str, words: tuple[str, ...] | None = None) -> Scan:
    """One Python file's scan; a file that does not parse is named unread. With `words`
    (see CLUES), the statements without any are not walked."""
    done = Scan(rel, text)
    try:
        tree = ast.parse(text, rel)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte in the source
        line = getattr(exc, "lineno", 0) or 0
        done.unread.append(Unread(rel, line, "syntax", getattr(exc, "msg", str(exc))))
        return done
    done.builds = "CUDAExtension" in text or "cpp_extension" in text
    if words is not None:
        if done.builds or "setup" in rel:
            words += ARCH_CLUES
        done.clues = _offsets(text, words)
        if not done.clues:
            return done
        done.starts = [0] + [m.end() for m in LINE_END.finditer(text)] + [len(text)]
    done.visit(tree)
    return done
