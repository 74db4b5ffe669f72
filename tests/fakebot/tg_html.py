"""Telegram's HTML parse mode, as the Bot API server applies it.

``parse_html`` returns the visible text and its entities (offsets in UTF-16 code units) or
raises ``HtmlParseError`` with Telegram's own wording (the server prefixes it with
"Bad Request: can't parse entities: "). Modelled on the documented rules: a fixed tag set,
proper nesting, only ``&lt; &gt; &amp; &quot;`` and numeric character references decoded
(any other ``&`` stays literal), attributes quoted or bare.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TAG_TYPES = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "a": "text_link",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "tg-emoji": "custom_emoji",
}
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_ENTITY = re.compile(r"&(?:#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6})|([a-zA-Z]{2,8}));")
_NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9-]*")
_ATTR_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_-]*")


class HtmlParseError(ValueError):
    """Malformed HTML; ``str(err)`` is Telegram's description after the common prefix."""


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit Telegram counts in."""
    return len(text.encode("utf-16-le")) // 2


@dataclass
class _Open:
    tag: str
    attrs: dict[str, str]
    offset: int  # UTF-16 offset in the visible text
    entity_type: str


@dataclass
class ParsedHtml:
    text: str
    entities: list[dict[str, object]] = field(default_factory=list)


def _decode_entities(raw: str) -> str:
    def repl(m: re.Match[str]) -> str:
        dec, hexa, name = m.groups()
        if dec is not None:
            return chr(int(dec)) if 0 < int(dec) <= 0x10FFFF else m.group(0)
        if hexa is not None:
            return chr(int(hexa, 16)) if 0 < int(hexa, 16) <= 0x10FFFF else m.group(0)
        return _NAMED.get(name.lower(), m.group(0))

    return _ENTITY.sub(repl, raw)


def _parse_attrs(src: str, pos: int, tag: str, base: int) -> tuple[dict[str, str], int]:
    """Parse attributes from ``src[pos:]`` up to ``>``; return them and the index after it."""
    attrs: dict[str, str] = {}
    n = len(src)
    while True:
        while pos < n and src[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            raise HtmlParseError(f"Unclosed start tag at byte offset {base}")
        if src[pos] == ">":
            return attrs, pos + 1
        if src[pos] == "/" and pos + 1 < n and src[pos + 1] == ">":
            raise HtmlParseError(f'Unsupported self-closing tag "{tag}" at byte offset {base}')
        m = _ATTR_NAME.match(src, pos)
        if m is None:
            raise HtmlParseError(f'Empty attribute name in the tag "{tag}" at byte offset {base}')
        name = m.group(0).lower()
        pos = m.end()
        while pos < n and src[pos] in " \t\r\n":
            pos += 1
        if pos >= n or src[pos] != "=":
            if pos < n and src[pos] in ">":
                attrs[name] = ""
                continue
            raise HtmlParseError(
                f'Expected equal sign in declaration of an attribute of the tag "{tag}" '
                f"at byte offset {base}"
            )
        pos += 1
        while pos < n and src[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            raise HtmlParseError(f"Unclosed start tag at byte offset {base}")
        if src[pos] in "\"'":
            quote = src[pos]
            end = src.find(quote, pos + 1)
            if end < 0:
                raise HtmlParseError(f"Unclosed start tag at byte offset {base}")
            value = src[pos + 1 : end]
            pos = end + 1
        else:
            end = pos
            while end < n and src[end] not in " \t\r\n>":
                end += 1
            value = src[pos:end]
            pos = end
        attrs[name] = _decode_entities(value)


def parse_html(src: str) -> ParsedHtml:
    """Parse Telegram HTML into visible text and entities, or raise ``HtmlParseError``."""
    out: list[str] = []
    out_len = 0  # UTF-16 units emitted so far
    stack: list[_Open] = []
    entities: list[dict[str, object]] = []
    i = 0
    n = len(src)

    def byte_offset(idx: int) -> int:
        return len(src[:idx].encode("utf-8"))

    while i < n:
        lt = src.find("<", i)
        if lt < 0:
            lt = n
        if lt > i:
            chunk = _decode_entities(src[i:lt])
            out.append(chunk)
            out_len += utf16_len(chunk)
        if lt >= n:
            break
        i = lt
        if src.startswith("</", i):
            m = _NAME.match(src, i + 2)
            close = src.find(">", i)
            if close < 0:
                raise HtmlParseError(f"Unclosed end tag at byte offset {byte_offset(i)}")
            name = m.group(0).lower() if m and m.end() <= close else ""
            if not stack:
                raise HtmlParseError(f"Unexpected end tag at byte offset {byte_offset(i)}")
            top = stack[-1]
            if name != top.tag or src[i + 2 + len(name) : close].strip():
                raise HtmlParseError(
                    f'Unmatched end tag at byte offset {byte_offset(i)}, expected "</{top.tag}>", '
                    f'found "{src[i : close + 1]}"'
                )
            stack.pop()
            length = out_len - top.offset
            inside_pre = top.tag == "code" and bool(stack) and stack[-1].tag == "pre"
            if length > 0 and not inside_pre:
                entity: dict[str, object] = {
                    "type": top.entity_type,
                    "offset": top.offset,
                    "length": length,
                }
                if top.entity_type == "text_link":
                    entity["url"] = top.attrs.get("href", "")
                if top.entity_type == "pre" and top.attrs.get("language"):
                    entity["language"] = top.attrs["language"]
                entities.append(entity)
            i = close + 1
            continue
        m = _NAME.match(src, i + 1)
        if m is None:
            raise HtmlParseError(f"Unsupported start tag at byte offset {byte_offset(i)}")
        tag = m.group(0).lower()
        if tag not in _TAG_TYPES:
            raise HtmlParseError(f'Unsupported start tag "{tag}" at byte offset {byte_offset(i)}')
        attrs, i = _parse_attrs(src, m.end(), tag, byte_offset(lt))
        entity_type = _TAG_TYPES[tag]
        if tag == "span" and attrs.get("class") != "tg-spoiler":
            raise HtmlParseError(f'Unsupported start tag "span" at byte offset {byte_offset(lt)}')
        if tag == "a":
            href = attrs.get("href", "")
            if not href:
                raise HtmlParseError(f"Can't find URL in the tag at byte offset {byte_offset(lt)}")
        if stack and (stack[-1].tag == "code" or (stack[-1].tag == "pre" and tag != "code")):
            # Telegram allows only <code class="language-..."> inside <pre>; nothing in <code>.
            raise HtmlParseError(f'Unsupported start tag "{tag}" at byte offset {byte_offset(lt)}')
        if tag == "code" and stack and stack[-1].tag == "pre":
            cls = attrs.get("class", "")
            if cls.startswith("language-"):
                stack[-1].attrs["language"] = cls.removeprefix("language-")
        stack.append(_Open(tag=tag, attrs=attrs, offset=out_len, entity_type=entity_type))
    if stack:
        raise HtmlParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1].tag}"')
    entities.sort(key=lambda e: (int(str(e["offset"])), -int(str(e["length"]))))
    return ParsedHtml(text="".join(out), entities=entities)
