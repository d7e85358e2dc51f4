#!/usr/bin/env python3
"""Lists the C++/CUDA functions longer than a limit, and exits 1 when there is one.

Usage: function_lengths.py [--limit N] [--root DIR] PATH...
  PATH: files or folders (relative to --root, default the current directory); folders are searched for
  .h/.cpp/.cu/.cuh files. A function's length runs from the first line of its signature (template line
  included) to its closing brace. Prints "path:line: name: N lines" per offender, longest first.

The scan is a brace matcher, not a parser: comments, string and character literals (raw strings included) and
preprocessor lines are blanked first, then every '{' at namespace or class scope is classified by the text
before it (since the last ';', '{' or '}'): a namespace, a class, an initialiser (after '=' or an identifier,
as in a constructor's `member_{x}`), or a function body when that text holds a parameter list. Lambdas and
local classes inside a function count as part of it.
"""
import argparse
import os
import re
import sys

EXTS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
DEFAULT_LIMIT = 80


def blank(text):
    """text with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or
                                                                               text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


NAME_BEFORE_PAREN = re.compile(r"((?:[A-Za-z_~][\w]*\s*(?:<[^(){};]*>)?\s*::\s*)*(?:operator\s*(?:\(\)|[^\s(]+)|~?[A-Za-z_]\w*))\s*\($")
NOT_NAMES = {"if", "for", "while", "switch", "return", "decltype", "alignas", "sizeof", "noexcept", "requires",
             "__attribute__", "__launch_bounds__", "static_assert", "catch"}


def function_name(head):
    """The (qualified) name of the function whose signature is head, or None when head has no parameter list."""
    depth = 0
    for k, ch in enumerate(head):
        if ch == "(":
            if depth == 0:
                m = NAME_BEFORE_PAREN.search(head[:k + 1])
                if m:
                    name = re.sub(r"\s+", "", m.group(1))
                    if name.split("::")[-1] not in NOT_NAMES:
                        return name
            depth += 1
        elif ch == ")":
            depth -= 1
    return None


def classify(head):
    """What a '{' opens at namespace or class scope, from the text before it."""
    h = head.strip()
    if not h:
        return "block"
    if re.search(r"\bnamespace\b", h) or re.match(r'extern\s*$', h):
        return "namespace"
    last = h[-1]
    if last == "=" or last == "," or last == "[" or last == "(" or last == "]":
        return "init"
    bare = re.sub(r"^template\s*<.*?>\s*", "", h, flags=re.S)
    if re.match(r"(?:typedef\s+)?(?:class|struct|union|enum)\b", bare) and "(" not in bare.split(":")[0]:
        return "class"
    name = function_name(h)
    if name is None:
        return "init" if (last.isalnum() or last in "_>") else "block"
    # A constructor's initialiser list: `: member_{value}` braces come before the body.
    if re.search(r"\)\s*(?:noexcept\s*)?:(?!:)", h) and (last.isalnum() or last in "_>"):
        return "ctor_init"
    return "function"


def block_end(text, k):
    """The index just past the '}' that closes the '{' at text[k] (or len(text) if it never closes)."""
    depth, j, n = 1, k + 1, len(text)
    while j < n and depth:
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
        j += 1
    return j


def scan(text):
    """Yields (first line, name, length in lines) for every function body in the blanked text."""
    line_of = [0] * (len(text) + 1)
    ln = 1
    for k, ch in enumerate(text):
        line_of[k] = ln
        if ch == "\n":
            ln += 1
    line_of[len(text)] = ln
    stack = []  # kinds of the open braces
    head_start = 0
    k = 0
    n = len(text)
    while k < n:
        ch = text[k]
        if ch == "{":
            kind = classify(text[head_start:k])
            if kind == "function":
                start = head_start + (len(text[head_start:k]) - len(text[head_start:k].lstrip()))
                j = block_end(text, k)
                yield line_of[start], function_name(text[head_start:k]), line_of[j - 1] - line_of[start] + 1
                k = j
                head_start = k
                continue
            if kind in ("init", "ctor_init"):
                j = block_end(text, k)
                k = j  # the head goes on (`= {...};`, or the constructor's body after its initialisers)
                continue
            stack.append(kind)
            head_start = k + 1
        elif ch == "}":
            if stack:
                stack.pop()
            head_start = k + 1
        elif ch == ";":
            head_start = k + 1
        elif ch == ":" and text[head_start:k].strip() in ("public", "private", "protected"):
            head_start = k + 1
        k += 1


SELF_CHECK = r"""
namespace a { namespace {
struct S : Base<decltype(f())> {
  S(int x) : x_(x), y_{x} {        // a constructor with braced initialisers: 3 lines
    if (x) { y_ = 1; }
  }
  int x_, y_;
};
const int kTable[] = {1, 2, 3};
const char* kText = R"(not a { brace)" "}";  // nor this }
}  // namespace
template <class T>
T Foo::bar(T v) const {              /* { */
  auto f = [&](int k) { return k + '}'; };
  return f(v);
}
}  // namespace a
int main() { return 0; }
"""


def self_check():
    """The scanner measures a sample with every construct it must see through; a broken scan fails loudly."""
    got = [(name, length) for _, name, length in scan(blank(SELF_CHECK))]
    want = [("S", 3), ("Foo::bar", 5), ("main", 1)]
    if got != want:
        sys.exit(f"function_lengths: the scanner is broken: it measured {got} in its self-check, expected {want}")


def files_under(root, paths):
    for p in paths:
        full = os.path.join(root, p)
        if os.path.isfile(full):
            yield full
            continue
        for d, dirs, files in os.walk(full):
            dirs.sort()
            for f in sorted(files):
                if f.endswith(EXTS):
                    yield os.path.join(d, f)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=DEFAULT_LIMIT)
    ap.add_argument("--root", default=".")
    ap.add_argument("--all", action="store_true", help="list every function with its length")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args(argv)
    self_check()
    found = []
    nfuncs = 0
    for path in files_under(args.root, args.paths):
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = blank(fh.read())
        rel = os.path.relpath(path, args.root)
        for line, name, length in scan(text):
            nfuncs += 1
            if args.all or length > args.limit:
                found.append((length, rel, line, name))
    found.sort(key=lambda f: (-f[0], f[1], f[2]))
    for length, rel, line, name in found:
        print(f"{rel}:{line}: {name}: {length} lines")
    over = [f for f in found if f[0] > args.limit]
    print(f"function_lengths: {nfuncs} functions scanned, {len(over)} over {args.limit} lines", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
