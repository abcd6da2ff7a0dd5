"""Recursive-descent parser: tokens -> syntax tree (grammar in docs/filters.md).

Precedence, loosest first::

    OR
    AND
    NOT
    = == != <> < <= > >=   [NOT] IN   [NOT] BETWEEN   [NOT] LIKE   IS [NOT] NULL
        [NOT] BEGINS WITH   [NOT] ENDS WITH        (one per operand: they do not chain)
    + -            (binary, left-associative)
    * / %          (left-associative)
    - +            (unary)
    literal, field, function call, CASE ... END, ( expression )

Every error is a :class:`FilterSyntaxError` pointing at the token where the parser gave
up, with a message that says what it expected there.
"""

from __future__ import annotations

from typing import Final

from spool.server.expr.ast import (
    MAX_DEPTH,
    Affix,
    And,
    Arith,
    Between,
    Call,
    Case,
    Comparison,
    Field,
    In,
    IsNull,
    Like,
    Literal,
    Node,
    Not,
    Or,
    Unary,
)
from spool.server.expr.budget import check_regex_total, check_text, check_tokens
from spool.server.expr.errors import FilterSyntaxError
from spool.server.expr.functions import compile_regex, lookup
from spool.server.expr.lexer import Kind, Token, tokenize

_COMPARISON_OPS: Final = frozenset({"=", "==", "!=", "<>", "<", "<=", ">", ">="})
_KEYWORDS: Final = frozenset(
    {
        "AND",
        "OR",
        "NOT",
        "IN",
        "BETWEEN",
        "LIKE",
        "IS",
        "NULL",
        "TRUE",
        "FALSE",
        "CASE",
        "WHEN",
        "THEN",
        "ELSE",
        "END",
        "BEGINS",
        "ENDS",
        "WITH",
    }
)


def _show(tok: Token) -> str:
    if tok.kind is Kind.EOF:
        return "the end of the filter"
    text = tok.text if len(tok.text) <= 30 else tok.text[:27] + "..."
    return repr(text)


class _Parser:
    def __init__(self, text: str) -> None:
        check_text(text)
        self.text = text
        self.tokens = tokenize(text)
        check_tokens(len(self.tokens) - 1, text)  # the end is a token of the list
        self.i = 0
        self.nesting = 0
        #: instructions of the regular expressions compiled so far (the budget's)
        self.regex_total = 0

    # --- helpers ------------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind is not Kind.EOF:
            self.i += 1
        return tok

    def previous(self) -> Token | None:
        return self.tokens[self.i - 1] if self.i > 0 else None

    def error(self, message: str, tok: Token | None = None) -> FilterSyntaxError:
        return FilterSyntaxError(message, (tok or self.tok).pos, self.text)

    def is_word(self, *words: str, tok: Token | None = None) -> bool:
        t = tok or self.tok
        return t.kind is Kind.WORD and t.value in words

    def expect_word(self, word: str, context: str) -> Token:
        if not self.is_word(word):
            raise self.error(f"expected {word} {context}, found {_show(self.tok)}")
        return self.advance()

    def expect(self, kind: Kind, context: str) -> Token:
        if self.tok.kind is not kind:
            raise self.error(f"expected {kind.value} {context}, found {_show(self.tok)}")
        return self.advance()

    def checked(self, node: Node) -> Node:
        if node.depth > MAX_DEPTH:
            raise FilterSyntaxError(
                f"expression nested too deeply (more than {MAX_DEPTH} levels)",
                node.pos,
                self.text,
            )
        return node

    def charge_regex(self, instructions: int, pos: int) -> None:
        self.regex_total += instructions
        check_regex_total(self.regex_total, pos, self.text)

    def enter(self) -> None:
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise self.error(f"expression nested too deeply (more than {MAX_DEPTH} levels)")

    def leave(self) -> None:
        self.nesting -= 1

    # --- grammar ------------------------------------------------------------------------

    def parse(self) -> Node:
        if self.tok.kind is Kind.EOF:
            raise self.error("the filter is empty")
        node = self.expression()
        tok = self.tok
        if tok.kind is not Kind.EOF:
            if tok.kind is Kind.RPAREN:
                raise self.error("unbalanced ')': no '(' to close", tok)
            if tok.kind is Kind.OP and tok.value in _COMPARISON_OPS:
                raise self.error(
                    f"comparisons do not chain: {_show(tok)} follows a complete comparison "
                    "(combine comparisons with AND / OR)",
                    tok,
                )
            raise self.error(
                f"unexpected {_show(tok)} after a complete expression "
                "(missing AND / OR, or an operator?)",
                tok,
            )
        return node

    def expression(self) -> Node:
        self.enter()
        try:
            return self.or_expr()
        finally:
            self.leave()

    def or_expr(self) -> Node:
        first = self.and_expr()
        if not self.is_word("OR"):
            return first
        items = [first]
        while self.is_word("OR"):
            self.advance()
            items.append(self.and_expr())
        return self.checked(Or(tuple(items), pos=first.pos))

    def and_expr(self) -> Node:
        first = self.not_expr()
        if not self.is_word("AND"):
            return first
        items = [first]
        while self.is_word("AND"):
            self.advance()
            items.append(self.not_expr())
        return self.checked(And(tuple(items), pos=first.pos))

    def not_expr(self) -> Node:
        if self.is_word("NOT"):
            tok = self.advance()
            self.enter()
            try:
                operand = self.not_expr()
            finally:
                self.leave()
            return self.checked(Not(operand, pos=tok.pos))
        return self.predicate()

    def predicate(self) -> Node:
        left = self.additive()
        tok = self.tok
        if tok.kind is Kind.OP and tok.value in _COMPARISON_OPS:
            self.advance()
            right = self.additive()
            return self.checked(Comparison(tok.value, left, right, pos=left.pos))
        negated = False
        if self.is_word("NOT") and self.is_word(
            "IN", "BETWEEN", "LIKE", "BEGINS", "ENDS", tok=self.peek()
        ):
            self.advance()
            negated = True
        elif self.is_word("IS"):
            self.advance()
            is_not = False
            if self.is_word("NOT"):
                self.advance()
                is_not = True
            self.expect_word("NULL", "after IS" + (" NOT" if is_not else ""))
            return self.checked(IsNull(left, is_not, pos=left.pos))
        if self.is_word("IN"):
            self.advance()
            items = self.value_list("IN")
            return self.checked(In(left, items, negated, pos=left.pos))
        if self.is_word("BETWEEN"):
            self.advance()
            low = self.additive()
            self.expect_word("AND", "between the bounds of BETWEEN")
            high = self.additive()
            return self.checked(Between(left, low, high, negated, pos=left.pos))
        if self.is_word("LIKE"):
            like_tok = self.advance()
            pat = self.tok
            if pat.kind is not Kind.STRING:
                raise self.error(
                    "LIKE needs a quoted regular expression (e.g. /sym LIKE '^IB'), "
                    f"found {_show(pat)}"
                )
            self.advance()
            what = "NOT LIKE" if negated else like_tok.text.upper()
            regex = compile_regex(pat.value, pat.pos, self.text, what)
            self.charge_regex(regex.program_size, pat.pos)
            return self.checked(Like(left, pat.value, negated, regex=regex, pos=left.pos))
        if self.is_word("BEGINS", "ENDS"):
            word = self.advance()
            self.expect_word("WITH", f"after {word.value}")
            items = self.value_list(f"{word.value} WITH")
            return self.checked(Affix(left, items, word.value == "ENDS", negated, pos=left.pos))
        return left

    def value_list(self, operator: str) -> tuple[Node, ...]:
        self.expect(Kind.LPAREN, f"after {operator} (a list of values in parentheses)")
        if self.tok.kind is Kind.RPAREN:
            raise self.error(f"the list after {operator} is empty")
        items = [self.expression()]
        while self.tok.kind is Kind.COMMA:
            self.advance()
            items.append(self.expression())
        tok = self.tok
        if tok.kind is not Kind.RPAREN:
            raise self.error(
                f"expected ',' or ')' in the list after {operator}, found {_show(tok)}"
            )
        self.advance()
        return tuple(items)

    def additive(self) -> Node:
        node = self.term()
        while self.tok.kind is Kind.OP and self.tok.value in ("+", "-"):
            op = self.advance()
            right = self.term()
            node = self.checked(Arith(op.value, node, right, pos=node.pos))
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.tok.kind is Kind.OP and self.tok.value in ("*", "/", "%"):
            op = self.advance()
            right = self.unary()
            node = self.checked(Arith(op.value, node, right, pos=node.pos))
        return node

    def unary(self) -> Node:
        tok = self.tok
        if tok.kind is Kind.OP and tok.value in ("-", "+"):
            self.advance()
            nxt = self.tok
            if nxt.kind is Kind.NUMBER and tok.value == "-":
                # Unary minus binds tightest, so '-5' is one literal (and renders back as such).
                self.advance()
                return Literal(-nxt.value, pos=tok.pos)
            self.enter()
            try:
                operand = self.unary()
            finally:
                self.leave()
            return self.checked(Unary(tok.value, operand, pos=tok.pos))
        return self.primary()

    def primary(self) -> Node:
        tok = self.tok
        kind = tok.kind
        if kind is Kind.NUMBER or kind is Kind.STRING:
            self.advance()
            return Literal(tok.value, pos=tok.pos)
        if kind is Kind.PATH:
            self.advance()
            return Field(tok.value, pos=tok.pos)
        if kind is Kind.LPAREN:
            self.advance()
            node = self.expression()
            if self.tok.kind is not Kind.RPAREN:
                raise self.error(
                    f"the '(' at column {tok.pos} is not closed: expected ')', "
                    f"found {_show(self.tok)}"
                )
            self.advance()
            return node
        if kind is Kind.WORD:
            word = tok.value
            if word == "NULL":
                self.advance()
                return Literal(None, pos=tok.pos)
            if word == "TRUE":
                self.advance()
                return Literal(True, pos=tok.pos)
            if word == "FALSE":
                self.advance()
                return Literal(False, pos=tok.pos)
            if word == "CASE":
                return self.case()
            if self.peek().kind is Kind.LPAREN and word not in _KEYWORDS:
                return self.call()
            if word in _KEYWORDS:
                raise self.error(self._expected_value(f"found the keyword {word}"))
            prev = self.previous()
            if prev is not None and prev.text == "/" and prev.pos + 1 == tok.pos:
                raise self.error(
                    f"'/{tok.text}' follows a complete value, so its '/' divides "
                    f"(missing AND / OR before /{tok.text}?)",
                    prev,
                )
            raise self.error(
                f"unknown word {tok.text!r}: field paths start with '/' (e.g. /{tok.text}) "
                "and strings need quotes"
            )
        raise self.error(self._expected_value(f"found {_show(tok)}"))

    def _expected_value(self, found: str) -> str:
        prev = self.previous()
        message = "expected a value" if prev is None else f"expected a value after {prev.text!r}"
        return message if self.tok.kind is Kind.EOF else f"{message}, {found}"

    def call(self) -> Node:
        name_tok = self.advance()
        self.advance()  # '('
        self.enter()
        try:
            args: list[Node] = []
            if self.tok.kind is not Kind.RPAREN:
                args.append(self.expression())
                while self.tok.kind is Kind.COMMA:
                    self.advance()
                    args.append(self.expression())
            if self.tok.kind is not Kind.RPAREN:
                raise self.error(
                    f"expected ',' or ')' in the arguments of {name_tok.value}, "
                    f"found {_show(self.tok)}"
                )
            self.advance()
        finally:
            self.leave()
        name = name_tok.value
        if name == "IF":
            if not 2 <= len(args) <= 3:
                raise self.error(
                    f"IF takes 2 or 3 arguments (condition, then[, else]), got {len(args)}",
                    name_tok,
                )
            default = args[2] if len(args) == 3 else None
            return self.checked(Case(((args[0], args[1]),), default, pos=name_tok.pos))
        fn = lookup(name_tok.text, name_tok.pos, self.text)
        if len(args) < fn.min_args or (fn.max_args is not None and len(args) > fn.max_args):
            raise self.error(f"{fn.name} {fn.arity()}, got {len(args)}", name_tok)
        node = Call(fn.name, tuple(args), pos=name_tok.pos)
        if fn.check is not None:
            self.charge_regex(fn.check(node, self.text), name_tok.pos)
        return self.checked(node)

    def case(self) -> Node:
        case_tok = self.advance()
        self.enter()
        try:
            whens: list[tuple[Node, Node]] = []
            if not self.is_word("WHEN"):
                raise self.error(f"expected WHEN after CASE, found {_show(self.tok)}")
            while self.is_word("WHEN"):
                self.advance()
                cond = self.expression()
                self.expect_word("THEN", "after the WHEN condition")
                whens.append((cond, self.expression()))
            default = None
            if self.is_word("ELSE"):
                self.advance()
                default = self.expression()
            self.expect_word("END", "to close CASE" if whens else "after CASE")
        finally:
            self.leave()
        return self.checked(Case(tuple(whens), default, pos=case_tok.pos))


def parse(text: str) -> Node:
    """Parse expression text into a tree.

    Raises:
        FilterSyntaxError: the text is not a valid expression; ``.position`` is 1-based.
    """
    try:
        return _Parser(text).parse()
    except RecursionError as exc:  # belt and braces: MAX_DEPTH should make this unreachable
        raise FilterSyntaxError("expression nested too deeply", 1, text) from exc
