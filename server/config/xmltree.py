"""The configuration XML as a tree of elements that know their line and path.

The XML is read with :mod:`xml.parsers.expat` directly (not ``ElementTree``) because every
element must know its line for the error messages. DOCTYPE declarations (and so entity
definitions) and processing instructions are refused: a configuration file has no use for
them and they are how XML parsers get attacked.

:class:`Children` is how a section reader looks at an element: it checks the children
against what the element may contain (unknown names get a "did you mean" hint, elements of
features that do not exist yet get "not supported yet"), refuses repeats of single-valued
elements and text in a container, and hands out the children by tag.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from xml.parsers import expat

from spool.server.config.errors import ConfigError

__all__ = ["Children", "Spec", "XmlNode", "fail", "parse_tree", "reject_attributes"]

#: Child element -> may it repeat?
Spec = Mapping[str, bool]


@dataclass(eq=False, slots=True)
class XmlNode:
    """One element with the line it starts on; ``path`` is filled once the tree is built."""

    tag: str
    line: int
    attributes: tuple[str, ...] = ()
    children: list[XmlNode] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    path: str = ""


def fail(node: XmlNode, message: str) -> ConfigError:
    """A :class:`ConfigError` at ``node`` (its path and line); the caller raises it."""
    return ConfigError(node.path, node.line, message)


def parse_tree(data: bytes | str) -> XmlNode:
    """Parse XML into :class:`XmlNode` objects, refusing DOCTYPE and processing instructions.

    Raises:
        ConfigError: malformed XML, an unencodable character, a DOCTYPE or a processing
            instruction (with the line; the path of the open element where there is one).
    """
    # A str is already decoded: encode it ourselves and make expat ignore any encoding= in
    # the XML declaration.
    override = None
    if isinstance(data, str):
        decoded = data
        try:
            data = decoded.encode("utf-8")
        except UnicodeEncodeError as exc:
            line = decoded.count("\n", 0, exc.start) + 1
            column = exc.start - decoded.rfind("\n", 0, exc.start)
            raise ConfigError(
                "", line, f"the text has an unencodable character (column {column})"
            ) from None
        override = "utf-8"
    parser = expat.ParserCreate(encoding=override)
    parser.buffer_text = True
    stack: list[XmlNode] = []
    roots: list[XmlNode] = []

    def open_path() -> str:
        return "".join("/" + node.tag for node in stack)

    def start(tag: str, attributes: dict[str, str]) -> None:
        parent = stack[-1] if stack else None
        node = XmlNode(tag, parser.CurrentLineNumber, tuple(attributes))
        if parent is None:
            roots.append(node)
        else:
            parent.children.append(node)
        stack.append(node)

    def end(tag: str) -> None:
        stack.pop()

    def text(data: str) -> None:
        if stack:
            stack[-1].text.append(data)

    def doctype(name: str, *_: object) -> None:
        raise ConfigError(
            "", parser.CurrentLineNumber, "a DOCTYPE is not allowed in a configuration file"
        )

    def instruction(target: str, data: str) -> None:
        raise ConfigError(
            open_path(),
            parser.CurrentLineNumber,
            f"processing instruction <?{target}?> is not allowed in a configuration file",
        )

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    parser.StartDoctypeDeclHandler = doctype
    parser.ProcessingInstructionHandler = instruction
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise ConfigError(
            open_path(),
            exc.lineno,
            f"malformed XML: {expat.ErrorString(exc.code)} (column {exc.offset + 1})",
        ) from None
    root = roots[0]
    _assign_paths(root)
    return root


def _assign_paths(root: XmlNode) -> None:
    """Give every node its path; repeated siblings get an XPath-style ``[n]`` suffix."""
    root.path = "/" + root.tag
    pending = [root]
    while pending:
        node = pending.pop()
        counts: dict[str, int] = {}
        for child in node.children:
            counts[child.tag] = counts.get(child.tag, 0) + 1
        seen: dict[str, int] = {}
        for child in node.children:
            seen[child.tag] = seen.get(child.tag, 0) + 1
            index = f"[{seen[child.tag]}]" if counts[child.tag] > 1 else ""
            child.path = f"{node.path}/{child.tag}{index}"
            pending.append(child)


class Children:
    """The children of one element, checked against what that element may contain.

    Args:
        node: the element.
        spec: the children it may have, and whether each may repeat.
        unsupported: children of the AMPS-shaped file that this version does not have,
            each with the feature they belong to ("<X> is not supported yet (FEATURE
            arrive in a later version of Spool)"); refused, never ignored.

    Raises:
        ConfigError: text in the element, an unknown or unsupported child, or a repeated
            single-valued one (at the second occurrence).
    """

    def __init__(
        self, node: XmlNode, spec: Spec, unsupported: Mapping[str, str] | None = None
    ) -> None:
        self.node = node
        self._by_tag: dict[str, list[XmlNode]] = {}
        if "".join(node.text).strip():
            raise fail(node, f"<{node.tag}> holds elements, not text")
        for child in node.children:
            if child.tag not in spec:
                raise _unknown(child, node, spec, unsupported or {})
            siblings = self._by_tag.setdefault(child.tag, [])
            if siblings and not spec[child.tag]:
                raise fail(
                    child,
                    f"<{child.tag}> may appear only once in <{node.tag}> "
                    f"(first at line {siblings[0].line})",
                )
            siblings.append(child)

    def one(self, tag: str) -> XmlNode | None:
        """The child called ``tag``, or None."""
        nodes = self._by_tag.get(tag)
        return nodes[0] if nodes else None

    def many(self, tag: str) -> list[XmlNode]:
        """Every child called ``tag``, in file order."""
        return self._by_tag.get(tag, [])

    def require(self, tag: str, why: str = "") -> XmlNode:
        """The child called ``tag``; its absence is an error at this element."""
        node = self.one(tag)
        if node is None:
            raise fail(self.node, f"<{self.node.tag}> needs a <{tag}>{why}")
        return node


def _unknown(
    child: XmlNode, parent: XmlNode, spec: Spec, unsupported: Mapping[str, str]
) -> ConfigError:
    if child.tag in unsupported:
        return fail(
            child,
            f"<{child.tag}> is not supported yet ({unsupported[child.tag]} arrive in a later "
            "version of Spool); remove this element",
        )
    allowed = sorted(spec)
    hint = ""
    folded = [tag for tag in allowed if tag.lower() == child.tag.lower()]
    if folded:
        hint = f"; element names are case-sensitive, did you mean <{folded[0]}>?"
    else:
        close = difflib.get_close_matches(child.tag, allowed, n=1, cutoff=0.75)
        if close:
            hint = f"; did you mean <{close[0]}>?"
    listing = ", ".join(allowed) if allowed else "nothing"
    return fail(
        child, f"unknown element <{child.tag}> in <{parent.tag}> (allowed: {listing}){hint}"
    )


def reject_attributes(root: XmlNode) -> None:
    """Refuse any attribute anywhere in the tree: every value is a child element.

    Raises:
        ConfigError: at the first element (in document order) that has one.
    """
    pending = [root]
    while pending:
        node = pending.pop()
        if node.attributes:
            raise fail(
                node,
                f"attributes are not used in Spool's configuration (found "
                f"{', '.join(node.attributes)}); write values as child elements",
            )
        pending.extend(reversed(node.children))
