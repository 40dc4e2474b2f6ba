"""Text that is written but never shown, removed before an answer is looked for, so an answer
cannot hide in it (extract.strip_hidden calls strip_invisible after comments and code blocks).

LaTeX: \\phantom{..}, \\hphantom{..}, \\vphantom{..} (they leave the space of their content,
nothing shown); text coloured white: \\textcolor{white}{..}, \\color{white}{..} and the switch
{\\color{white} ..}, which runs to the end of its brace group or of its math ($, \\), \\], \\end),
else to the end of the text; a comment environment \\begin{comment}..\\end{comment}.
White is "white", #fff, #ffffff, [rgb]{1,1,1}, [RGB]{255,255,255}, [HTML]{FFFFFF}, [gray]{1}.

Struck-out text, which a reader sees withdrawn: \\cancel, \\bcancel, \\xcancel, \\sout, \\st, \\xout
arguments, <s>, <strike>, <del> elements and markdown ~~..~~ (not touching a letter or digit outside,
which is LaTeX spacing: x~~=~~5).

Markdown comments: a line "[//]: # (..)", "[comment]: <> (..)" (a link definition to # or <>,
never rendered). Zero-width characters (U+200B-U+200D, U+2060, U+FEFF, a soft hyphen) are
dropped, so "4<ZWSP>2" reads as the 42 a reader sees.

HTML: an element that is never rendered (script, style, template, head, title), one with the
hidden attribute, or a style of display:none, visibility:hidden, opacity:0, font-size:0, or a
white or transparent color (a <font color="white"> too), with all it holds; a <details> that is
not open, but for its <summary> (the one part a reader sees).

Each part removed becomes one space, so the text on either side does not join into a new
number. Every regular expression here runs in linear time (possessive runs, no nested
quantifiers): rewards read adversarial completions."""

from __future__ import annotations

import re

_COMMENT_ENV = re.compile(r"\\begin\s*+\{comment\}.*?(?:\\end\s*+\{comment\}|\Z)", re.DOTALL)

_PHANTOM = re.compile(r"\\(?:[hv]?phantom|b?cancel|xcancel|sout|st|xout)(?![A-Za-z])")
_COLOR = re.compile(r"\\(textcolor|color|mathcolor)(?![A-Za-z])[ \t]*+(?:\[([A-Za-z]*+)\][ \t]*+)?\{([^{}]*+)\}")
_LATEX_HIDER = re.compile(_PHANTOM.pattern + "|" + _COLOR.pattern)

_OPEN_TAG = re.compile(r"<([A-Za-z][A-Za-z0-9]*+)([^<>]*+)>")
_NEVER_SHOWN = {"script", "style", "template", "head", "title", "s", "strike", "del"}  # or shown struck out
# GFM strikethrough on one line; a ~~ touching a letter or digit outside is LaTeX spacing (x~~=~~5)
_STRIKE = re.compile(r"(?<![\w\\])~~(?=[^\s~])[^~\n$]++(?<=\S)~~(?!\w)")
_MARKDOWN_COMMENT = re.compile(r"^ {0,3}\[[^\]\n]*+\]:[ \t]*+(?:#|<>)[^\n]*+", re.MULTILINE)
_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
_VOID_TAGS = {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
_QUOTED = re.compile(r"\"[^\"]*+\"|'[^']*+'")
_HIDDEN_ATTRIBUTE = re.compile(r"(?:^|\s)hidden(?![\w-])", re.IGNORECASE)  # read outside quotes
_OPEN_ATTRIBUTE = re.compile(r"(?:^|\s)open(?![\w-])", re.IGNORECASE)
_ZERO = r"(?:0++(?:\.0*+)?|\.0++)(?![\d.])"
_HIDING_STYLE = re.compile(
    r"display\s*+:\s*+none|visibility\s*+:\s*+(?:hidden|collapse)"
    rf"|opacity\s*+:\s*+{_ZERO}|font-size\s*+:\s*+{_ZERO}"
    r"|(?<![\w-])color\s*+[:=]\s*+[\"']?(?:white\b|transparent\b|#fff(?:fff)?\b"
    r"|rgba?\(\s*+255\s*+,\s*+255\s*+,\s*+255\b)",
    re.IGNORECASE)
_SUMMARY = re.compile(r"<summary(?![A-Za-z0-9])[^<>]*+>", re.IGNORECASE)
_SUMMARY_CLOSE = re.compile(r"</summary\s*+>", re.IGNORECASE)
# the full value of each colour model for white; "" is a named colour
_WHITE_VALUE = {"rgb": 1.0, "RGB": 255.0, "gray": 1.0, "Gray": 15.0, "cmy": 0.0, "cmyk": 0.0}


def _is_white(model: str | None, spec: str) -> bool:
    """A LaTeX colour (with its model, if any, as in \\color[rgb]{1,1,1}) that is white."""
    spec = "".join(spec.split())
    if not model:
        return spec.lower() in ("white", "white!100", "#fff", "#ffffff")
    if model.lower() == "html":
        return spec.lower() == "ffffff"
    if model not in _WHITE_VALUE:
        return False
    try:
        return all(float(part) == _WHITE_VALUE[model] for part in spec.split(","))
    except ValueError:
        return False


def _group_end(text: str, i: int) -> int:
    """Where the brace group opening at text[i] == "{" ends (just after its "}"); the end of the
    text when it is never closed. An escaped brace (\\{) does not count."""
    depth = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            return i
    return len(text)


def _argument_end(text: str, i: int) -> int:
    """Where the argument of a command that ends at i ends: a brace group, else one token."""
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        return _group_end(text, i)
    command = re.match(r"\\(?:[A-Za-z]++|.)", text[i:i + 80])
    return i + (command.end() if command else min(1, len(text) - i))


def _switch_end(text: str, i: int) -> int:
    """Where a \\color switch that ends at i stops colouring: the "}" closing the group it is in,
    or the end of its math ($, \\), \\], \\end), else the end of the text."""
    depth = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and text[i + 1:i + 2] in (")", "]") or text.startswith("\\end", i) or char == "$":
            if depth == 0:
                return i
        if char == "\\":
            i += 2
            continue
        if char == "}" and depth == 0:
            return i
        depth += {"{": 1, "}": -1}.get(char, 0)
        i += 1
    return len(text)


def _strip_latex(text: str) -> str:
    """Without phantoms and white text (see the module's docstring)."""
    parts, pos = [], 0
    while (match := _LATEX_HIDER.search(text, pos)) is not None:
        end = match.end()
        command, model, colour = match.group(1, 2, 3)
        if command is not None and not _is_white(model, colour):  # a colour a reader sees
            parts.append(text[pos:end])
            pos = end
            continue
        if command == "color" and text[end:end + 1] != "{":  # a switch: to the end of its group or math
            end = _switch_end(text, end)
        else:  # a phantom, \textcolor{white}{..} or \color{white}{..}: its argument
            end = _argument_end(text, end)
        parts.append(text[pos:match.start()] + " ")
        pos = end
    return "".join(parts) + text[pos:]


def _element_end(text: str, tag: str, i: int) -> int:
    """Where the <tag> element whose opening tag ends at i closes (just after its </tag>), counting
    nested ones; the end of the text when it is never closed."""
    depth = 1
    for match in re.compile(rf"<(/?){re.escape(tag)}(?![A-Za-z0-9])[^<>]*+>", re.IGNORECASE).finditer(text, i):
        if match.group(1):
            depth -= 1
        elif not match.group().endswith("/>"):
            depth += 1
        if depth == 0:
            return match.end()
    return len(text)


def _summary(text: str, start: int, end: int) -> str:
    """The visible text of the first <summary> in text[start:end] ("" without one). A closed
    <details> inside it shows nothing (one level of summaries is read, so the work stays linear)."""
    summary = _SUMMARY.search(text, start, end)
    if summary is None:
        return ""
    close = _SUMMARY_CLOSE.search(text, summary.end(), end)
    return _strip_html(text[summary.end():close.start() if close else end], nested=True)


def _strip_html(text: str, nested: bool = False) -> str:
    """Without hidden elements and the body of closed <details> (see the module's docstring)."""
    parts, pos = [], 0
    for match in _OPEN_TAG.finditer(text):
        if match.start() < pos:  # inside an element already removed
            continue
        tag, attributes = match.group(1).lower(), match.group(2)
        hidden = (tag in _NEVER_SHOWN or _HIDDEN_ATTRIBUTE.search(_QUOTED.sub("", attributes)) is not None
                  or _HIDING_STYLE.search(attributes) is not None)
        collapsed = tag == "details" and _OPEN_ATTRIBUTE.search(_QUOTED.sub("", attributes)) is None
        if not hidden and not collapsed:
            continue
        void = tag in _VOID_TAGS or attributes.endswith("/")
        end = match.end() if void else _element_end(text, tag, match.end())
        shown = "" if hidden or nested else _summary(text, match.end(), end)  # a closed <details> shows its summary
        parts.append(text[pos:match.start()] + " " + (shown + " " if shown else ""))
        pos = end
    return "".join(parts) + text[pos:]


def strip_invisible(text: str) -> str:
    """The text without comment environments, LaTeX phantoms and white text, hidden HTML elements
    and the body of closed <details> (each unclosed one runs to the end of the text)."""
    text = _ZERO_WIDTH.sub("", text)
    text = _MARKDOWN_COMMENT.sub(" ", _STRIKE.sub(" ", _COMMENT_ENV.sub(" ", text)))
    return _strip_html(_strip_latex(text))
