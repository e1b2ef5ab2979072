"""HTML nesting measured on the bytes before a tree builder (lexbor, lxml) sees them: a builder spends time per
open element on every new tag, so 60,000 nested divs cost seconds and 400,000 minutes.

What is measured is the HTML5 tree builder's stack of open elements, as its rules grow and shrink it. A
count of start and end tags took `<div/>` for closed (the builder opens a div: "/" closes only void and
SVG/MathML elements) and let any end tag close something (a stray `</b>` closes nothing): `"<div/>" * N`
or `"<div></b>" * N` nested N levels past it. Here an end tag closes only what the builder's rules close (an
element in scope, never past a special element; a misnested formatting end tag moves its element inside
the block after it rather than closing the block), comments, script text and attribute values hide no
tags, and the formatting elements the builder reopens (`<p><b id=1>..<p>` reopens every unclosed b in each
paragraph) count as it reopens them. lexbor parses a select's content as the body's (the new select).
Shortcuts (foster parenting, a few implied closes) read deeper than the builder builds, never shallower
(tests/security/test_html_nesting.py compares with lexbor). Paragraphs, list items and options, whose end
tags are optional, are on the stack but not counted, as before. Reopening and reordering cost the builder
work that grows with the square of the nesting: a budget of their own (REWORK_PER_LEVEL).

Over 600 lines on purpose: the builder's rules that open and close elements are one model, each rule
reading the stack the others leave; split, one half's shortcut would be the other's under-count.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from functools import lru_cache

from chalicelib.parsers.base import MeasuredOnce, parse_failed

#: namespaces; an annotation-xml whose encoding is HTML holds HTML (an integration point), any other does not
HTML, SVG, MATHML, HTML_ANNOTATION = 0, 1, 2, 3


def _names(text: str) -> frozenset[bytes]:
    return frozenset(text.encode().split())


#: elements never left open: void elements (HTML spec 13.1.2) and the legacy ones the builder treats so
VOID = _names(
    "area base basefont bgsound br col embed frame hr image img input keygen link meta param source track wbr"
)
#: elements whose text the tokenizer reads to their end tag (scripting off, as lexbor parses: noscript is
#: markup); script has escapes of its own (_script_end)
RAW_TEXT = _names("style xmp iframe noembed noframes textarea title script")
#: on the stack (they close what they hold) but not counted: their end tags are optional, the next one
#: closes them
NOT_COUNTED = _names("p li dd dt option optgroup rb rt rp rtc")
FORMATTING = _names("a b big code em font i nobr s small strike strong tt u")
HEADINGS = _names("h1 h2 h3 h4 h5 h6")
SPECIAL = _names(
    "address applet area article aside base basefont bgsound blockquote body br button caption center col "
    "colgroup dd details dir div dl dt embed fieldset figcaption figure footer form frame frameset h1 h2 h3 h4 "
    "h5 h6 head header hgroup hr html iframe img input keygen li link listing main marquee menu meta nav "
    "noembed noframes noscript object ol p param plaintext pre script search section select source style "
    "summary table tbody td template textarea tfoot th thead title tr track ul wbr xmp"
)
#: scope boundaries; select too: no end tag closes past it in lexbor (as a boundary it only keeps more open)
SCOPE_BOUNDARY = _names("applet caption html table td th marquee object template select")
#: SVG/MathML elements whose content is HTML again (integration points): special and scope boundaries
INTEGRATION = {
    SVG: _names("foreignobject desc title"),
    MATHML: _names("mi mo mn ms mtext"),
    HTML_ANNOTATION: _names("annotation-xml"),
}
_HTML_ENCODINGS = (b"text/html", b"application/xhtml+xml")
#: start tags that close an open p first
CLOSES_P = _names(
    "address article aside blockquote center details dialog dir div dl fieldset figcaption figure footer "
    "header hgroup main menu nav ol p search section summary ul h1 h2 h3 h4 h5 h6 pre listing form plaintext "
    "xmp hr li dd dt"
)
#: start tags before which the builder does not reopen formatting elements
NO_REOPEN = (CLOSES_P - {b"xmp"}) | _names(
    "base basefont bgsound link meta noframes script style template title body html frameset table hr "
    "textarea iframe noembed rb rtc rp rt param source track caption col colgroup frame head tbody td tfoot th "
    "thead tr"
)
#: HTML start tags that end SVG/MathML content (font only with color, face or size)
BREAKOUT = _names(
    "b big blockquote body br center code dd div dl dt em embed h1 h2 h3 h4 h5 h6 head hr i img li listing "
    "menu meta nobr ol p pre ruby s small span strong strike sub sup table tt u ul var"
)
#: start tags a template reads as the head's (its content's kind is told by the first other one)
_TEMPLATE_HEAD = _names("base basefont bgsound link meta noframes script style template title")
_HEAD_ELEMENTS = _TEMPLATE_HEAD | {b"html", b"head"}
_TABLE_START = _names("caption colgroup tbody tfoot thead tr td th")
#: start tags after which a frameset no longer replaces the body (the builder's frameset-ok flag)
_FRAMESET_NOT_OK = _names(
    "body pre listing li dd dt button applet marquee object table area br embed img keygen wbr input hr textarea "
    "xmp iframe select"
)
#: elements that put a marker in the list of active formatting elements
MARKER_ELEMENTS = _names("applet marquee object td th caption template")
TABLE_SECTIONS = _names("tbody thead tfoot")
IMPLIED_END = _names("dd dt li optgroup option p rb rp rt rtc")
#: an element taken out of the stack that still holds what was opened in it (no tag name starts with "#")
REMOVED = b"#removed"
#: a marker in the list of active formatting elements
MARKER = -1
#: steps a walk of that list takes for free (a document's list is a few entries long); past them, rework
_FREE_STEPS = 16
#: constructs read between two looks at the parse's clock (HtmlDepth's check_time)
CHECK_EVERY = 1 << 14
#: reopened formatting elements and stack entries moved by misnesting, per level of the depth limit: a
#: document's worth of legitimately misnested formatting stays far below (corpus: none at all)
REWORK_PER_LEVEL = 100

# start tags' handling, as bits: what a start tag does before (or instead of) opening its element
_LIST_ITEM, _CLOSES_P, _FORMATTING, _REOPEN, _RAW, _VOID, _OWN_RULE = (1 << n for n in range(7))
_OWN_RULES = HEADINGS | _names(
    "html body frameset svg math table td th tr tbody thead tfoot caption colgroup col select input button "
    "option optgroup rb rtc rp rt form plaintext applet marquee object template"
)


def _start_flags(name: bytes) -> int:
    return (
        _LIST_ITEM * (name in (b"li", b"dd", b"dt"))
        | _CLOSES_P * (name in CLOSES_P)
        | _FORMATTING * (name in FORMATTING)
        | _REOPEN * (name not in NO_REOPEN)
        | _RAW * (name in RAW_TEXT)
        | _VOID * (name in VOID or name == b"head")
        | _OWN_RULE * (name in _OWN_RULES)
    )


#: start tags that, at the top of the stack, close it and open the same element again (HtmlDepth._start)
_REPLACE_THEMSELVES = _names("p li dd dt")
_START_FLAGS = {name: _start_flags(name) for name in VOID | RAW_TEXT | FORMATTING | NO_REOPEN | _OWN_RULES}
_ANY_OTHER_START = _REOPEN

# end tags' handling: which scope the element must be in (the rest: "any other end tag")
_END_SCOPE: dict[bytes, str] = {
    **dict.fromkeys(
        _names(
            "address article aside blockquote button center details dialog dir div dl fieldset figcaption "
            "figure footer header hgroup listing main menu nav ol pre search section summary ul applet marquee "
            "object dd dt select"
        ),
        "",
    ),
    b"p": "button",
    b"li": "list",
    **dict.fromkeys(_names("table tr td th caption tbody thead tfoot"), "table"),
}

_WS = rb"[\t\n\f\r ]"
_VALUE = rb"""(?:"[^"]*+"|'[^']*+'|(?!["'])[^\t\n\f\r >]*+)"""
# an attribute as the tokenizer reads it: a quote opens a value only after "=" (else it is part of a name)
_ATTRIBUTE = rb"[^\t\n\f\r />][^\t\n\f\r />=]*+(?:" + _WS + rb"*+=" + _WS + rb"*+" + _VALUE
_ATTRIBUTE += rb"|(?!" + _WS + rb"*+=))"
_TAG_BODY = rb"(/?)([A-Za-z][^\t\n\f\r />]*+)((?:" + _WS + rb"++|/(?!>)|(?>" + _ATTRIBUTE + rb"))*+)(/?)>"
# the next construct: a whole tag (groups 1-4), else what follows a "<" that starts something else (5): a
# comment, a bogus comment or doctype, "</" not followed by a letter, a tag that runs past the input
# (the tokenizer drops it at the end), or nothing yet
_NEXT = re.compile(rb"<(?:" + _TAG_BODY + rb"|([A-Za-z/!?]|\Z))")
_TAG = re.compile(rb"<" + _TAG_BODY)
# one attribute after another in a tag's attributes (_TAG_BODY's group 3): its name and its value
_ATTRIBUTE_NAME_VALUE = (
    rb"([^\t\n\f\r />][^\t\n\f\r />=]*+)(?:" + _WS + rb"*+=" + _WS + rb"*+(" + _VALUE + rb"))?+"
)
_ATTRIBUTE_PAIR = re.compile(rb"(?:" + _WS + rb"++|/)*+" + _ATTRIBUTE_NAME_VALUE)
_FONT_BREAKOUT = {b"color", b"face", b"size"}
_COMMENT_END = re.compile(rb"--!?>")
_SCRIPT_DATA = re.compile(rb"<!--|</script(?=[\t\n\f\r />])", re.IGNORECASE)
_SCRIPT_ESCAPED = re.compile(rb"-->|<(/?)script(?=[\t\n\f\r />])", re.IGNORECASE)
_SCRIPT_DOUBLE_ESCAPED = re.compile(rb"-->|</script(?=[\t\n\f\r />])", re.IGNORECASE)


@lru_cache(maxsize=16)
def _raw_text_end(name: bytes) -> re.Pattern[bytes]:
    return re.compile(rb"</" + re.escape(name) + rb"(?=[\t\n\f\r />])", re.IGNORECASE)


@lru_cache(maxsize=4096)
def _index_keys(name: bytes, space: int) -> tuple[object, ...]:
    """The lists an open element is indexed under (HtmlDepth.where): its name, and the classes the builder's
    rules look for in the stack (special, scope boundaries)."""
    if name == REMOVED:
        return ()
    if space != HTML:
        special = name in INTEGRATION[space] or (space == MATHML and name == b"annotation-xml")
        return ((space, name), *(("special", "scope", "list_stop") if special else ()))
    keys: list[object] = ["html", name]
    if name in SPECIAL:
        keys.append("special")
        if name not in (b"address", b"div", b"p"):
            keys.append("list_stop")  # an li/dd/dt start looks for an open one no further down
    if name in SCOPE_BOUNDARY:
        keys.append("scope")
    if name in (b"html", b"table", b"template"):
        keys.append("table_scope")
    for key, names in (("button", {b"button"}), ("list", {b"ol", b"ul"}), ("heading", HEADINGS)):
        if name in names:
            keys.append(key)
    if name in TABLE_SECTIONS:
        keys.append("section")
    if name in (b"td", b"th"):
        keys.append("cell")
    return tuple(keys)


class HtmlDepth:
    """The deepest nesting of an HTML document (HtmlDepth(limit).feed(bytes)), refused past `limit`. The
    document may come in pieces; a construct cut at a piece's end is read again with the next piece.
    `check_time`: the parse budget's check (ParseContext.check_time), called every CHECK_EVERY constructs."""

    def __init__(self, limit: int, check_time: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self.check_time = check_time
        self.depth = 0  # counted elements open
        self.max_depth = 0
        self.tail = b""
        # the stack of open elements, bottom first: name, namespace, serial; `at`: an open serial's position
        self.names: list[bytes] = []
        self.spaces: list[int] = []
        self.serials: list[int] = []
        self.where: dict[object, list[int]] = {}  # _index_keys → stack positions, ascending
        self.lists: dict[tuple[bytes, int], tuple[list[int], ...]] = {}  # an element's lists in `where`
        self.next_serial = 0
        self.at: dict[int, int] = {}
        # the list of active formatting elements as lexbor keeps it (its order and its quirks: _adopt): the
        # serials of their elements, MARKER for markers; `formatting`: an entry's (name, attributes)
        self.afe: list[int] = []
        self.formatting: dict[int, tuple[bytes, bytes]] = {}
        self.reopen_pending = False  # whether an entry's element may have closed since the last look
        self.form_open = False
        self.in_head = True  # no body element yet
        self.before_body = True  # no body element before the start tag being read
        self.frameset_ok = True  # the builder's flag: no content yet that a frameset could not replace
        self.template_modes: dict[int, str] = {}  # an open template's position → what it holds
        self.rework = 0

    # ------------------------------------------------------------ tokens

    def feed(self, piece: bytes) -> None:
        window = self.tail + piece if self.tail else piece
        self.tail = b""
        pos, end, search = 0, len(window), _NEXT.search
        check_time, countdown = self.check_time, CHECK_EVERY
        while pos < end:
            countdown -= 1
            if not countdown and check_time is not None:
                check_time()
                countdown = CHECK_EVERY
            found = search(window, pos)
            lt = found.start() if found is not None else end
            if lt > pos and self.frameset_ok and window[pos:lt].strip(b"\t\n\f\r "):
                self.in_head = self.frameset_ok = False  # text starts the body
            if lt > pos and self.reopen_pending:  # text: the builder reopens formatting elements first
                self._text()
            if found is None:
                return
            closing, name, attributes, self_closing, other = found.groups()
            if name is None:
                after = self._other(window, lt, other)
            elif closing:
                self._end(name.lower())
                after = found.end()
            elif (leaf := self._leaf(window, found.end(), name.lower(), attributes)) >= 0:
                after = leaf
            else:
                raw = self._start(name.lower(), attributes, self_closing == b"/")
                after = found.end() if raw is None else self._past_raw_text(window, found.end(), raw)
            if after < 0:  # cut at the end of this piece: read again with the next
                self.tail = window[lt:]
                return
            pos = after

    def _leaf(self, window: bytes, start: int, name: bytes, attributes: bytes) -> int:
        """Where an element ends when only text is in it and it changes nothing but the depth, one level
        more for a moment: no rule of its own (a span) or a formatting element that evicts no entry and
        closes no other, and nothing to reopen. Half the tags of a documentation page; their start and end
        cost twice the rest. Else -1."""
        if self.reopen_pending or self.in_head or self.template_modes or self.depth >= self.limit:
            return -1
        if self.spaces and self.spaces[-1] != HTML:
            return -1
        flags = _START_FLAGS.get(name)
        # a formatting element, with the list empty: it drops no entry alike and closes no a
        if flags is not None and not (flags & _FORMATTING and name != b"nobr" and not self.afe):
            return -1
        close = window.find(b"<", start)
        end_tag = _TAG.match(window, close) if close >= 0 else None
        if end_tag is None or not end_tag.group(1) or end_tag.group(2).lower() != name:
            return -1
        self.max_depth = max(self.max_depth, self.depth + 1)
        return end_tag.end()

    def _other(self, window: bytes, lt: int, kind: bytes) -> int:
        """Past a construct that is not a whole tag; -1 when it runs past the window."""
        if kind == b"!":
            rest = window[lt + 2 : lt + 9]
            if rest.startswith(b"--"):
                return _past_comment(window, lt + 4)
            if self.spaces and self.spaces[-1] != HTML and rest == b"[CDATA[":
                close = window.find(b"]]>", lt + 9)
                return -1 if close < 0 else close + 3
            if len(rest) < 7 and (b"--".startswith(rest) or b"[CDATA[".startswith(rest)):
                return -1
        elif kind == b"/":
            after = window[lt + 2 : lt + 3]
            if not after or after.isalpha():  # an end tag that runs past the window
                return -1
        elif kind != b"?":  # a start tag that runs past the window, or a "<" at its end
            return -1
        close = window.find(b">", lt + 2)  # a bogus comment (a doctype too) up to the next ">"; "</>" too
        return -1 if close < 0 else close + 1

    def _past_raw_text(self, window: bytes, start: int, name: bytes) -> int:
        """Past the text of a script/style/textarea... element and its end tag; -1 when it runs past the
        window (the element's start tag is read again with the next piece). lexbor reopens formatting
        elements inside a textarea with text (past one leading newline): they open and close with it."""
        close = _script_end(window, start) if name == b"script" else _raw_text_end(name).search(window, start)
        if name == b"textarea" and self.reopen_pending:
            end = close.start() if close is not None else len(window)
            first_newline = (
                2 if window.startswith(b"\r\n", start) else int(window[start : start + 1] in (b"\n", b"\r"))
            )
            if end > start + first_newline:
                position = len(self.names)
                self._push(name)
                self._reopen()
                self._pop_to(position)
        if close is None:
            return -1
        tag = _TAG.match(window, close.start())
        return -1 if tag is None else tag.end()

    # ------------------------------------------------------------ the stack

    def _push(self, name: bytes, space: int = HTML) -> int:
        position = len(self.names)
        serial = self.next_serial
        self.next_serial += 1
        self.names.append(name)
        self.spaces.append(space)
        self.serials.append(serial)
        self.at[serial] = position
        for listed in self.lists.get((name, space)) or self._lists_of(name, space):
            listed.append(position)
        if space != HTML or name not in NOT_COUNTED:
            self.depth += 1
            if self.depth > self.max_depth:
                self.max_depth = self.depth
                if self.depth > self.limit:
                    raise parse_failed(
                        f"The HTML nests elements more than {self.limit:,} levels deep; it cannot be "
                        "parsed in reasonable time."
                    )
        return serial

    def _lists_of(self, name: bytes, space: int) -> tuple[list[int], ...]:
        lists = tuple(self.where.setdefault(key, []) for key in _index_keys(name, space))
        self.lists[name, space] = lists
        return lists

    def _pop_to(self, position: int, closing_cells: bool = True) -> None:
        """Closes the element at `position` and every element above it. A cell or caption closes with its
        marker (the builder closes one only by "close the cell"/"close the caption", which clear to it);
        `closing_cells` False: the caller clears once for all (`</template>`)."""
        names, spaces, serials, lists = self.names, self.spaces, self.serials, self.lists
        while len(names) > position or (names and names[-1] == REMOVED):  # removed ones go with the top
            name, space, serial = names.pop(), spaces.pop(), serials.pop()
            self.at.pop(serial, None)
            for listed in lists[name, space]:
                listed.pop()
            if space != HTML or name not in NOT_COUNTED:
                self.depth -= 1
            if serial in self.formatting:
                self.reopen_pending = True
            if closing_cells and space == HTML and name in (b"td", b"th", b"caption"):
                self._clear_to_marker()
        if self.template_modes:
            self.template_modes = {at: mode for at, mode in self.template_modes.items() if at < len(names)}

    def _pop_top(self) -> None:
        self._pop_to(len(self.names) - 1)

    def _remove(self, position: int) -> None:
        """Takes one element out of the stack below its top (a closed form, an a inside an a): it stays the
        parent of what was opened in it, so it stays counted, as an entry nothing finds, until the elements
        below it close."""
        if position == len(self.names) - 1:
            self._pop_top()
            return
        self.names[position] = REMOVED  # not open any more: nothing finds it
        self._reindex()

    def _reindex(self) -> None:
        """The index and depth rebuilt after the stack changed below its top: rework, as much as the stack
        holds."""
        self._charge(len(self.names))
        self.where, self.lists, self.depth, self.at = {}, {}, 0, {}
        for position, (name, space, serial) in enumerate(
            zip(self.names, self.spaces, self.serials, strict=True)
        ):
            for listed in self.lists.get((name, space)) or self._lists_of(name, space):
                listed.append(position)
            self.depth += space != HTML or name not in NOT_COUNTED
            if name != REMOVED:
                self.at[serial] = position
        self.reopen_pending = True

    def _last(self, key: object) -> int:
        found = self.where.get(key)
        return found[-1] if found else -1

    def _in_scope(self, key: object, scope: str = "") -> int:
        """The position of the last open `key` element when no scope boundary is above it, else -1; `scope`:
        "button", "list" (their boundaries with the default ones) or "table" (html, table, template)."""
        position = self._last(key)
        if position < 0:
            return -1
        bound = self._last("table_scope") if scope == "table" else max(self._last("scope"), self._last(scope))
        return position if position >= bound else -1

    def _charge(self, steps: int) -> None:
        self.rework += steps
        if self.rework > REWORK_PER_LEVEL * self.limit:
            raise parse_failed(
                "The HTML's misnested or unclosed formatting makes a parser reopen or move elements more "
                f"than {REWORK_PER_LEVEL * self.limit:,} times; it cannot be parsed in reasonable time."
            )

    def _foreign(self) -> bool:
        """Whether a start tag here is SVG/MathML content (not at an integration point)."""
        return (
            bool(self.spaces)
            and self.spaces[-1] != HTML
            and self.names[-1] not in INTEGRATION[self.spaces[-1]]
        )

    def _foreign_space(self, name: bytes, attributes: bytes) -> int:
        if name == b"annotation-xml" and self.spaces[-1] == MATHML:
            return HTML_ANNOTATION if _has_attribute(attributes, {b"encoding"}, _HTML_ENCODINGS) else MATHML
        if name == b"svg" and self.names[-1] == b"annotation-xml":
            return SVG  # an svg in an annotation-xml is SVG again (the builder reads it as HTML's <svg>)
        return self.spaces[-1]

    def _text(self) -> None:
        if not self._foreign() and not self._in_columns_template():
            self._reopen()

    # ------------------------------------------------------------ start tags

    def _start(self, name: bytes, attributes: bytes, self_closing: bool) -> bytes | None:
        """Applies a start tag; returns the element's name when the text after it is raw (script...)."""
        if self.spaces and self.spaces[-1] != HTML and self._foreign():
            if name not in BREAKOUT and not (name == b"font" and _has_attribute(attributes, _FONT_BREAKOUT)):
                if not self_closing:
                    self._push(name, self._foreign_space(name, attributes))
                return None
            while self._foreign():  # an HTML element ends the SVG/MathML content it is in
                self._pop_top()
        self.before_body = self.in_head
        if self.in_head:  # until the body starts: there a noscript holds head elements only, as void
            if name == b"noscript":
                return None
            self.in_head = name in _HEAD_ELEMENTS
        if self.frameset_ok and name in _FRAMESET_NOT_OK:
            self.frameset_ok = name == b"input" and _has_attribute(attributes, {b"type"}, (b"hidden",))
        if self.template_modes and not self._template_reads(name):
            return None
        if name == b"form" and self.form_open and self._last(b"template") < 0:
            return None  # a form inside a form is left out (before it closes a p)
        names = self.names
        if (
            names
            and names[-1] == name
            and name in _REPLACE_THEMSELVES
            and self.spaces[-1] == HTML
            and (len(names) < 2 or names[-2] != REMOVED)
            and (name == b"p" or self._in_scope(b"p", "button") < 0)
        ):
            # a p (li, dd, dt) at the top closes and opens again (nothing above it; not formatting, nothing
            # to reopen): the stack as it was, unless a removed entry under it goes with it, or a p under an
            # li closes too. The dense case (`<p>` * N), at half the cost of the rules' walk
            return None
        flags = _START_FLAGS.get(name, _ANY_OTHER_START)
        if flags & _LIST_ITEM:  # an open one in the same list closes
            found = self._last(b"li") if name == b"li" else max(self._last(b"dd"), self._last(b"dt"))
            if found >= 0 and found >= self._last("list_stop"):
                self._pop_to(found)
        if name == b"hr" and self._in_scope(b"select") >= 0:
            self._pop_implied(IMPLIED_END)  # in a select, as an option does
        if flags & _CLOSES_P and b"p" in self.where:
            self._close_p()
        if flags & _FORMATTING:
            self._start_formatting(name, attributes.strip())
        elif flags & _OWN_RULE:
            self._start_own_rule(name, self_closing)
        else:
            if flags & _REOPEN and self.reopen_pending:
                self._reopen()
            if flags & _RAW:
                return name
            if not flags & _VOID:
                self._push(name)
        return None

    def _start_own_rule(self, name: bytes, self_closing: bool) -> None:
        if name in (b"select", b"input") and (select := self._in_scope(b"select")) >= 0:
            self._pop_to(select)  # they end an open select (a select inside it is left out)
            if name == b"select":
                return
        if name in (b"html", b"body"):
            if self.names[name == b"body" :] or (self.names and self.names[0] != b"html"):
                return  # after the first, their attributes go to the first; nothing opens
        elif name in HEADINGS and self.spaces and self.spaces[-1] == HTML and self.names[-1] in HEADINGS:
            self._pop_top()
        elif name in (b"svg", b"math"):
            if self.reopen_pending:
                self._reopen()
            if not self_closing:
                self._push(name, SVG if name == b"svg" else MATHML)
            return
        elif name == b"table":
            table = self._in_scope(b"table", "table")  # a table directly in a table ends it first
            if table >= 0 and max(self._last("cell"), self._last(b"caption")) < table:
                self._pop_to(table)
        elif name in (b"td", b"th", b"tr", b"caption", b"colgroup", b"col") or name in TABLE_SECTIONS:
            self._start_in_table(b"colgroup" if name == b"col" else name)
            return
        elif name == b"input":
            if self.reopen_pending:
                self._reopen()
            return
        elif name == b"frameset":
            self._start_frameset()
            return
        elif name == b"button" and (found := self._in_scope(b"button")) >= 0:
            self._pop_to(found)
        elif name in (b"option", b"optgroup"):
            if (
                self._in_scope(b"select") >= 0
            ):  # in a select they end the paragraph, option... open at the top
                self._pop_implied(IMPLIED_END - {b"optgroup"} if name == b"option" else IMPLIED_END)
            elif self.names and self.names[-1] == b"option":
                self._pop_top()
        elif name in (b"rb", b"rtc", b"rp", b"rt") and self._in_scope(b"ruby") >= 0:
            self._pop_implied(IMPLIED_END if name in (b"rb", b"rtc") else IMPLIED_END - {b"rtc"})
        elif name == b"form":
            self.form_open = self._last(b"template") < 0
        if name not in NO_REOPEN and self.reopen_pending:  # after what it closed, as the builder does
            self._reopen()
        self._push(name)
        if name in MARKER_ELEMENTS:
            self._add_marker()
        if name == b"template":
            self.template_modes[len(self.names) - 1] = "fresh"
        elif name == b"plaintext" and self.reopen_pending:
            # the rest is text (reopening what was open): read on as markup all the same, which can only
            # read deeper, as a plaintext the builder leaves out (in a template of columns) needs
            self._reopen()

    def _start_frameset(self) -> None:
        """A frameset opens inside a frameset, where the body would start, or in place of a body nothing has
        been written into yet ("frameset-ok"; it closes everything but html); else it is left out."""
        if self.names and self.names[-1] == b"frameset":
            self._push(b"frameset")
        elif self.before_body or self.frameset_ok:
            self._pop_to(1 if self.names[:1] == [b"html"] else 0)
            self._push(b"frameset")

    def _template_reads(self, name: bytes) -> bool:
        """Whether a start tag counts in the template open at the top: a template's first start tag (past
        head elements) sets what it holds; one that began with a col holds only cols (and templates), and
        the builder leaves out anything else, even a textarea or plaintext (so no raw text)."""
        top = len(self.names) - 1
        mode = self.template_modes.get(top)
        if mode == "fresh" and name not in _TEMPLATE_HEAD:
            mode = self.template_modes[top] = (
                "columns" if name == b"col" else "table" if name in _TABLE_START else "body"
            )
        return mode != "columns" or name == b"template"

    def _in_columns_template(self) -> bool:
        return bool(self.template_modes) and self.template_modes.get(len(self.names) - 1) == "columns"

    def _pop_implied(self, implied: frozenset[bytes]) -> None:
        """The builder's "generate implied end tags": the elements whose end tags are optional close, from
        the top down to the first that is not one."""
        while self.spaces and self.spaces[-1] == HTML and self.names[-1] in implied:
            self._pop_top()

    def _close_p(self) -> None:
        found = self._in_scope(b"p", "button")
        if found >= 0:
            self._pop_to(found)

    def _start_in_table(self, name: bytes) -> None:
        """A table's parts: outside a table they are left out; inside, the open cell, row or section they
        end is closed, and the row and section they need are opened (<td> alone opens tbody and tr)."""
        table, template = self._in_scope(b"table", "table"), self._last(b"template")
        if template > table:  # a template holding table parts is their table; one holding a body is not
            if self.template_modes.get(template) == "body":
                return
            table = template
        if table < 0:
            return
        if name in (b"td", b"th", b"tr"):
            row, section = self._last(b"tr"), self._last("section")
            if name != b"tr" and row > table:
                self._pop_to(row + 1)
            else:
                self._pop_to((section if section > table else table) + 1)
                if section <= table:
                    self._push(b"tbody")
                if name != b"tr":
                    self._push(b"tr")
        else:
            self._pop_to(table + 1)
        self._push(name)
        if name in MARKER_ELEMENTS:
            self._add_marker()

    # ------------------------------------------------------------ formatting elements

    def _add_marker(self) -> None:
        self.afe.append(MARKER)

    def _clear_to_marker(self) -> None:
        while self.afe:
            serial = self.afe.pop()
            if serial == MARKER:
                break
            del self.formatting[serial]
        self.reopen_pending = True

    def _walked(self, steps: int) -> None:
        if steps > _FREE_STEPS:
            self._charge(steps - _FREE_STEPS)

    def _afe_last(self, name: bytes) -> int:
        """The index of the last entry named `name` after the last marker, else -1."""
        afe = self.afe
        for index in range(len(afe) - 1, -1, -1):
            if afe[index] == MARKER or self.formatting[afe[index]][0] == name:
                self._walked(len(afe) - index)
                return index if afe[index] != MARKER else -1
        self._walked(len(afe))
        return -1

    def _afe_index(self, serial: int) -> int:
        afe = self.afe
        for index in range(len(afe) - 1, -1, -1):
            if afe[index] == serial:
                self._walked(len(afe) - index)
                return index
        self._walked(len(afe))
        return -1

    def _afe_remove(self, serial: int) -> None:
        if serial in self.formatting:
            del self.afe[self._afe_index(serial)], self.formatting[serial]

    def _afe_remove_at(self, index: int) -> None:
        if index < len(self.afe):
            serial = self.afe.pop(index)
            if serial != MARKER:
                del self.formatting[serial]

    def _start_formatting(self, name: bytes, attributes: bytes) -> None:
        if name == b"a" and (index := self._afe_last(b"a")) >= 0:
            earlier = self.afe[index]
            self._adopt(b"a")  # an a inside an a closes the first
            self._afe_remove(earlier)
            if (position := self.at.get(earlier, -1)) >= 0:
                self._remove(position)
        if self.reopen_pending:
            self._reopen()
        if name == b"nobr" and self._in_scope(b"nobr") >= 0:
            self._adopt(b"nobr")
            self._reopen()
        serial = self._push(name)
        # a fourth entry alike after the last marker drops the earliest (the builder's "Noah's Ark")
        alike, earliest, steps = 0, -1, 0
        for index in range(len(self.afe) - 1, -1, -1):
            steps += 1
            if self.afe[index] == MARKER:
                break
            if self.formatting[self.afe[index]] == (name, attributes):
                alike, earliest = alike + 1, index
        self._walked(steps)
        if alike >= 3:
            self._afe_remove_at(earliest)
        self.afe.append(serial)
        self.formatting[serial] = (name, attributes)

    def _reopen(self) -> None:
        """The builder's "reconstruct the active formatting elements": every entry after the last one still
        open (and after the last marker) is opened again, as a new element."""
        self.reopen_pending = False
        afe, at = self.afe, self.at
        if not afe or afe[-1] == MARKER or afe[-1] in at:
            return
        first = len(afe) - 1
        while first > 0 and afe[first - 1] != MARKER and afe[first - 1] not in at:
            first -= 1
        self._charge(len(afe) - first)
        for index in range(first, len(afe)):
            entry = self.formatting.pop(afe[index])
            afe[index] = self._push(entry[0])
            self.formatting[afe[index]] = entry

    def _adopt(self, name: bytes) -> None:
        """The builder's adoption agency for a formatting end tag (lexbor's): the element closes when it is
        the current node or nothing special is above it; else (`<b><div></b>`) the block stays open and the
        formatting element opens again inside it (_adopt_into)."""
        if (
            self.names
            and self.names[-1] == name
            and self.spaces[-1] == HTML
            and self.serials[-1] not in self.formatting
        ):
            self._pop_top()
            return
        for _ in range(8):
            index = self._afe_last(name)
            if index < 0:
                self._end_other(name)
                return
            element = self.afe[index]
            position = self.at.get(element, -1)
            if position < 0:
                self._afe_remove(element)
                return
            if self._last("scope") > position:
                return  # not in scope: left as it is
            specials = self.where.get("special", [])
            above = bisect_right(specials, position)
            if above == len(specials):
                self._pop_to(position)
                self._afe_remove(element)
                return
            self._adopt_into(index, position, specials[above])

    def _adopt_into(self, index: int, position: int, block: int) -> None:
        """One round of the adoption agency's inner loop as lexbor runs it. Between the formatting element
        and the block, from the block down: an element without an entry leaves the stack; past the third,
        an entry leaves the list but its element stays open (the spec closes it); the others are reopened
        in place (new elements). Then the entry at the formatting element's index *as found before the
        loop* leaves the list (lexbor does not shift it for entries the loop took out, so it may drop
        another entry and keep this one), a new formatting element is listed at the bookmark and opens
        just above the block. The stack changed below its top: rework, as much as it and the list hold."""
        entry = self.formatting[self.afe[index]]
        bookmark, kept, first_reopened = index, list[int](), True
        for inner, between in enumerate(range(block - 1, position, -1), start=1):
            serial = self.serials[between]
            if serial not in self.formatting:
                continue  # leaves the stack
            if inner > 3:
                self._afe_remove(serial)
            else:
                found = self._afe_index(serial)
                if first_reopened:  # the bookmark goes after the entry reopened next to the block
                    bookmark, first_reopened = found + 1, False
                reopened = self.next_serial
                self.next_serial += 1
                self.afe[found] = reopened
                self.formatting[reopened] = self.formatting.pop(serial)
                self.serials[between] = reopened
            kept.append(between)
        self._afe_remove_at(index)
        moved = self.next_serial
        self.next_serial += 1
        self.afe.insert(min(bookmark, len(self.afe)), moved)
        self.formatting[moved] = entry
        order = [*range(position), *reversed(kept), block, -1, *range(block + 1, len(self.names))]
        self.names = [self.names[old] if old >= 0 else entry[0] for old in order]
        self.spaces = [self.spaces[old] if old >= 0 else HTML for old in order]
        self.serials = [self.serials[old] if old >= 0 else moved for old in order]
        self._charge(len(self.afe))
        self._reindex()

    # ------------------------------------------------------------ end tags

    def _end(self, name: bytes) -> None:
        if name != b"template" and self._in_columns_template():
            return
        if self.spaces and self.spaces[-1] != HTML:
            if name in (b"p", b"br"):
                while self._foreign():
                    self._pop_top()
            else:  # the SVG/MathML elements open at the top close by name; past them, HTML's rules
                found = max(self._last((space, name)) for space in (SVG, MATHML, HTML_ANNOTATION))
                if found > self._last("html"):
                    self._pop_to(found)
                    return
        scope = _END_SCOPE.get(name)
        if scope is not None:
            found = self._in_scope(name, scope)
            if found >= 0:
                self._pop_to(found)
                if name in (b"applet", b"marquee", b"object"):
                    self._clear_to_marker()
        elif name in FORMATTING:
            self._adopt(name)
        elif name in HEADINGS:
            found = self._in_scope("heading")
            if found >= 0:
                self._pop_to(found)
        elif name == b"br":  # read as <br>
            self.frameset_ok = False
            if self.reopen_pending:
                self._reopen()
        elif name == b"form":
            self._end_form()
        elif name == b"template":
            found = self._last(b"template")
            if found >= 0:
                self._pop_to(found, closing_cells=False)
                self._clear_to_marker()
        elif name == b"colgroup":
            if self.names and self.names[-1] == b"colgroup":
                self._pop_top()
        elif name not in (b"html", b"body", b"head"):  # those switch the builder's mode; nothing closes
            self._end_other(name)

    def _end_form(self) -> None:
        if self._last(b"template") >= 0:
            found = self._in_scope(b"form")
            if found >= 0:
                self._pop_to(found)
            return
        self.form_open = False
        found = self._in_scope(b"form")
        if found >= 0:
            self._remove(found)  # the form alone: what it holds stays open

    def _end_other(self, name: bytes) -> None:
        """Any other end tag closes its element when no special element is above it."""
        found = self._last(name)
        if found >= 0 and found >= self._last("special"):
            self._pop_to(found)


def _past_comment(window: bytes, start: int) -> int:
    if window.startswith(b">", start) or window.startswith(b"->", start):  # <!--> and <!--->
        return window.index(b">", start) + 1
    close = _COMMENT_END.search(window, start)
    return -1 if close is None else close.end()


def _script_end(window: bytes, start: int) -> re.Match[bytes] | None:
    """The `</script` that ends a script's text: one inside `<!--` ... `<script>` ... `-->` does not."""
    state, pos = _SCRIPT_DATA, start
    while True:
        found = state.search(window, pos)
        if found is None:
            return None
        text = found.group()
        if text.startswith(b"</"):
            if state is not _SCRIPT_DOUBLE_ESCAPED:
                return found
            state, pos = _SCRIPT_ESCAPED, found.end()
        elif text == b"<!--":
            state, pos = _SCRIPT_ESCAPED, found.start() + 2  # "<!-->" ends the escape at once
        elif text == b"-->":
            state, pos = _SCRIPT_DATA, found.end()
        else:  # <script inside the escape
            state, pos = _SCRIPT_DOUBLE_ESCAPED, found.end()


def _has_attribute(attributes: bytes, names: set[bytes], values: tuple[bytes, ...] = ()) -> bool:
    """Whether a tag's attributes hold one of `names` (with one of `values`, when given: ASCII case
    insensitive, quotes off)."""
    for found in _ATTRIBUTE_PAIR.finditer(attributes):
        if found.group(1).lower() in names:
            value = (found.group(2) or b"").strip(b"\"'").lower()
            if not values or value in values:
                return True
    return False


# ---------------------------------------------------------------- measured once

_MEASURED: MeasuredOnce[int] = MeasuredOnce()


def measure_html(data: bytes, limit: int, check_time: Callable[[], None] | None = None) -> int:
    """HtmlDepth(limit) over a whole document: its depth, refused past `limit`; the same bytes are measured
    once (the preflight measures an upload, the HTML reader then the same text as UTF-8; an EPUB's chapters
    in the preflight and again as they are read). `check_time`: see HtmlDepth."""

    def measured() -> int:
        depth = HtmlDepth(limit, check_time)
        depth.feed(data)
        return depth.max_depth

    return _MEASURED.get(data, limit, measured)
