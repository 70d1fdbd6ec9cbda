"""The lark grammar of the "JMS" selector class (Jakarta Messaging 3.8.1.1), apart from
the callbacks that build selectors from it (:mod:`.jms`)."""

from __future__ import annotations

from typing import Final

GRAMMAR: Final = r"""
// JMS 1.1 / Jakarta Messaging 3.8.1.1 message selectors, as a single expression grammar
// (conditions and arithmetic share one precedence ladder; the transformer checks that
// each operator gets operands of the right kind, so "(a + b) > 1" and "(a = 1)" need no
// lookahead). Precedence, loosest first: OR, AND, NOT, comparison, + -, * /, unary + -.

?start: or_e

?or_e: and_e
     | or_e OR and_e                    -> or_
?and_e: not_e
      | and_e AND not_e                 -> and_
?not_e: cmp
      | NOT not_e                       -> not_
?cmp: sum
    | sum COMPOP sum                    -> compare
    | sum BETWEEN sum AND sum           -> between
    | sum NOT BETWEEN sum AND sum       -> not_between
    | sum IN "(" in_list ")"            -> in_
    | sum NOT IN "(" in_list ")"        -> not_in
    | sum LIKE STRING                   -> like
    | sum LIKE STRING ESCAPE STRING     -> like
    | sum NOT LIKE STRING               -> not_like
    | sum NOT LIKE STRING ESCAPE STRING -> not_like
    | sum IS NULL                       -> is_null
    | sum IS NOT NULL                   -> is_not_null
in_list: STRING ("," STRING)*
?sum: product
    | sum ADDOP product                 -> arith
?product: unary
        | product MULOP unary           -> arith
?unary: primary
      | ADDOP unary                     -> sign
?primary: "(" or_e ")"                  -> paren
        | STRING                        -> string
        | EXACT                         -> exact
        | APPROX                        -> approx
        | TRUE                          -> boolean
        | FALSE                         -> boolean
        | IDENT                         -> identifier

// Keywords are case-insensitive (3.8.1.1) and win over identifiers (priority 3); the
// lookahead keeps "order" or "in-stock" identifiers.
OR.3: /or(?![\w$.\-\u00b7])/i
AND.3: /and(?![\w$.\-\u00b7])/i
NOT.3: /not(?![\w$.\-\u00b7])/i
BETWEEN.3: /between(?![\w$.\-\u00b7])/i
IN.3: /in(?![\w$.\-\u00b7])/i
LIKE.3: /like(?![\w$.\-\u00b7])/i
ESCAPE.3: /escape(?![\w$.\-\u00b7])/i
IS.3: /is(?![\w$.\-\u00b7])/i
NULL.3: /null(?![\w$.\-\u00b7])/i
TRUE.3: /true(?![\w$.\-\u00b7])/i
FALSE.3: /false(?![\w$.\-\u00b7])/i

COMPOP: "<>" | ">=" | "<=" | "=" | ">" | "<"
ADDOP: "+" | "-"
MULOP: "*" | "/"

// 'literal''s': a quote is written twice.
STRING: /'(?:[^']|'')*'/
// Java floating-point literals: 7., .5, -57.9E2 (the sign is the unary operator), 7E3, 1d.
APPROX.2: /(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?/
        | /[0-9]+[eE][+-]?[0-9]+[fFdD]?/
        | /[0-9]+[fFdD]/
// Java integer literals: decimal, 0x hexadecimal, 0 octal, with an optional L.
EXACT: /0[xX][0-9a-fA-F]+[lL]?|[0-9]+[lL]?/
// Element and attribute names of the message (draft section 7.3): XML names, so '-' and
// '.' belong to an identifier ("net-change-pct"); subtraction needs a space before '-'.
IDENT: /[A-Za-z_$\u00c0-\uffff][\w$.\-\u00b7\u00c0-\uffff]*/

// Java whitespace: space, tab, form feed, line terminators.
%ignore /[ \t\f\r\n]+/
"""


__all__ = ["GRAMMAR"]
