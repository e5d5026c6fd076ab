"""Kafka's ``ssl.principal.mapping.rules`` (KIP-371, ``SslPrincipalMapper``): the name a
client certificate's subject maps to on the Kafka listener.

The rules are tried in order; the first that matches the whole distinguished name (in
RFC 2253 form, ``CN=alice,OU=eng,O=example``) gives the name:

- ``DEFAULT``: the distinguished name itself (the principal ``User:CN=alice,OU=eng,...``);
- ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash (lower
  or upper case the result): when ``pattern`` (a regular expression) matches the whole
  name, every match of it is replaced by ``replacement``, in which ``$1`` names a group, as
  Java's ``String.replaceAll``. ``RULE:^CN=(.*?),OU=.*$/$1/L`` maps
  ``CN=Alice,OU=eng`` to ``alice``.

No rule matching is an error: Kafka refuses the connection (see docs/security.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from proto.errors import MinibrokerError

__all__ = ["NoMatchingRuleError", "SslPrincipalMapper"]

_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRuleError(MinibrokerError):
    """No rule maps this distinguished name (Kafka's ``NoMatchingRule``)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None = None
    """None: DEFAULT."""
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(_python_replacement(self.replacement, self.pattern.groups), name)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules`` parsed (ValueError "Invalid rule" as Kafka's)."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.text = rules
        parsed = [_parse(rule) for rule in _split(rules)]
        self.rules: list[_Rule] = [rule for rule in parsed if rule is not None]

    def name(self, distinguished_name: str) -> str:
        """The name ``distinguished_name`` maps to; NoMatchingRuleError if none does."""
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRuleError(f"No rules apply to {distinguished_name}, rules {self.text}")


def _split(rules: str) -> list[str]:
    return [m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip()) if m.group(0)]


def _parse(rule: str) -> _Rule | None:
    match = _RULE_PARSER.match(rule)
    if match is None:
        raise ValueError(f"Invalid rule: {rule}")
    if match.end() != len(rule):
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end() :]}`")
    if match.group(1) is not None:
        return _Rule()
    if match.group(2) is not None:
        try:
            pattern = re.compile(match.group(2))
        except re.error as err:
            raise ValueError(f"Invalid rule: {rule}: {err}") from None
        return _Rule(pattern, match.group(4), match.group(6) == "L", match.group(6) == "U")
    return None  # an empty rule is ignored, as Kafka's


def _python_replacement(java: str, groups: int) -> str:
    """A Java ``replaceAll`` replacement in Python's ``re.sub`` syntax: ``$n`` is group n
    (a number past the groups drops digits from the right, then is literal, as Kafka's
    ``escapeLiteralBackReferences`` and Java do), ``\\x`` is a literal x."""
    out: list[str] = []
    i = 0
    while i < len(java):
        char = java[i]
        if char == "\\" and i + 1 < len(java):
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        match = _BACK_REFERENCE.match(java, i)
        if match is not None:
            digits = match.group(1)
            while len(digits) > 1 and int(digits) > groups:
                digits = digits[:-1]
            if int(digits) <= groups:
                out.append(f"\\g<{int(digits)}>")
                i += 1 + len(digits)
                continue
            out.append("$")
            i += 1
            continue
        out.append("\\\\" if char == "\\" else char)
        i += 1
    return "".join(out)
