"""Rust source read as text, for the checks in this directory
(`long-fns`, `doc-examples`): comments, strings and char literals blanked
so that their braces and keywords do not count, with every offset and
newline kept.
"""
import re

RAW_STRING = re.compile(r'b?r(#*)"')
IDENT_CHAR = re.compile(r'\w')


def blank(text):
    return ''.join(c if c == '\n' else ' ' for c in text)


def code_only(src, keep_strings=False):
    """`src` with comments, strings and char literals blanked, newlines kept;
    with `keep_strings`, comments only (attributes: `feature = "x"`)."""
    out, i, n = [], 0, len(src)
    while i < n:
        after_ident = i > 0 and IDENT_CHAR.match(src[i - 1])
        raw = None if after_ident else RAW_STRING.match(src, i)
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
        elif src.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith('/*', j):
                    depth, j = depth + 1, j + 2
                elif src.startswith('*/', j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
        elif raw:
            close = '"' + raw.group(1)
            end = src.find(close, raw.end())
            j = n if end < 0 else end + len(close)
        elif src[i] == '"' or (src.startswith('b"', i) and not after_ident):
            j = i + (2 if src[i] == 'b' else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            j += 1
        elif src[i] == "'" and src.startswith('\\', i + 1):
            # An escaped char literal: '\n', '\'', '\u{..}'.
            j = src.find("'", i + 3) + 1
        elif src[i] == "'" and i + 2 < n and src[i + 2] == "'":
            j = i + 3
        else:
            # Code, or a lifetime's quote.
            out.append(src[i])
            i += 1
            continue
        comment = src.startswith('//', i) or src.startswith('/*', i)
        out.append(blank(src[i:j]) if comment or not keep_strings else src[i:j])
        i = j
    return ''.join(out)
