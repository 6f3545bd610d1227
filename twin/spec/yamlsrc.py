"""YAML with line numbers, and pydantic errors turned into located Problems.

Lab files and scenario files share this. The file's text (bounded: spec/filebytes.py) is parsed
by libyaml (ruamel's C parser; its pure-Python loader took 7 s for a 1 MB file; where libyaml, a
YAML 1.1 parser, refuses what YAML 1.2 allows, ruamel's own parser decides, and its message is
shown), and plain dicts, lists and scalars are built from its events in one pass (_Builder), with
the line of every key and list item (SourceMap). Refused as they are met, before anything under
them is read: a second document, anchors and aliases (a few lines of nested aliases expand to
gigabytes), explicit tags, more than MAX_DEPTH levels of nesting (ruamel's composer recursed per
level: 700 levels of `[` raised RecursionError), a number longer than MAX_NUMBER_CHARS (Python
refuses to convert an int of 4,300 digits) or not finite (`.inf`), a key that appears twice.
The last three spoil one value, not the file's structure: each is kept as a problem (SourceMap.
refused), the value left out (the first of two equal keys kept), and the rest read on, so that
validation reports them with every other problem at once.

The plain document is validated by a pydantic model, and every validation error becomes a
Problem naming file, line and key (none where a value was left out: its own problem says why).
"""

from __future__ import annotations

import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
from ruamel.yaml import YAML, events, nodes
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.resolver import VersionedResolver

from twin.errors import MAX_PROBLEMS_LISTED, LabFileError, Problem, closest
from twin.spec.filebytes import MAX_FILE_BYTES, decoded, read_bounded, refuse
from twin.text import clipped, key_note, shown_name

__all__ = ["MAX_FILE_BYTES", "SourceMap", "dotted", "parse_yaml", "problems_from_validation", "read_yaml",
           "validate"]

Loc = tuple[Any, ...]


@dataclass
class SourceMap:
    """Finds the line (1-based) of a key path such as ('fabric', 'tiers'): the deepest part of the
    path the file has."""

    lines: dict[Loc, int]
    refused: dict[Loc, Problem] = field(default_factory=dict)  # values left out, and why (in file order)
    refused_more: int = 0  # refused beyond MAX_PROBLEMS_LISTED, not kept

    def refusal(self) -> LabFileError | None:
        """The values left out as one error, for a reader that does not validate (validate() merges
        them with the schema's problems)."""
        return LabFileError(list(self.refused.values()), more=self.refused_more) if self.refused else None

    def line(self, loc: Loc) -> int | None:
        best = 1
        for end in range(1, len(loc) + 1):
            found = self.lines.get(tuple(loc[:end]))
            if found is None:
                break
            best = found
        return best


# Nothing in either format nests deeper than 5 levels.
MAX_DEPTH = 32
# A number longer than this is no setting of ours (seeds are 32-bit).
MAX_NUMBER_CHARS = 24
_NUMBER = re.compile(r"[-+]?(\.?[0-9][0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?|0[xob][0-9a-fA-F_]+)")
_NOT_FINITE = re.compile(r"[-+]?\.(inf|Inf|INF|nan|NaN|NAN)")
_TAG = "tag:yaml.org,2002:"


def read_yaml(path: Path, raw: bytes | None = None) -> tuple[dict, SourceMap]:
    """Parse a YAML file (or `raw`, its bytes read elsewhere: standard input); every problem with
    the file itself becomes a LabFileError with the line."""
    return parse_yaml(path, read_bounded(path) if raw is None else raw)


def parse_yaml(path: Path, raw: bytes) -> tuple[dict, SourceMap]:
    """Parse a file's bytes (read by read_yaml, or from standard input), named `path` in errors."""
    text = decoded(path, raw)
    lines: dict[Loc, int] = {}
    builder = _Builder(path, YAML(typ="safe", pure=False).parse(text), lines)
    try:
        root = builder.document()
    except YAMLError:
        root = None  # libyaml (YAML 1.1) refuses `[host-g1-h1:nic1]`, which YAML 1.2 allows: ask ruamel's own
    try:
        if root is None:
            lines.clear()
            builder = _Builder(path, YAML(typ="safe", pure=True).parse(text), lines)
            root = builder.document()
    except MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise LabFileError([Problem(str(path), line, "", f"YAML syntax: {exc.problem}",
                                    "check indentation and quoting on that line")]) from None
    except YAMLError as exc:
        mark = getattr(exc, "position", None)
        line = text.count("\n", 0, mark) + 1 if isinstance(mark, int) else None
        raise refuse(path, line, f"YAML: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                     "save the file as plain UTF-8 text") from None
    if not isinstance(root, dict):
        raise LabFileError([Problem(str(path), 1, "", "the file must be a YAML mapping", "start with `name: ...`")])
    return root, SourceMap(lines, builder.refused, builder.refused_more)


class _Yaml12Resolver(VersionedResolver):
    """Scalars are read by YAML 1.2's core schema, whatever a `%YAML` directive says (libyaml does
    not pass one on). ruamel's resolver looks the version up for every scalar, under libyaml through
    two caught AttributeErrors: a third of the time 11,000 faults took to parse."""

    processing_version = (1, 2)


class _Builder:
    """Plain data from the parser's events in one pass, with the line of every key and list item
    (ruamel's composer and constructor would recurse per level and expand aliases: both are
    refused here before anything under them is read)."""

    def __init__(self, path: Path, stream: typing.Iterable[events.Event], lines: dict[Loc, int]) -> None:
        self.path, self.events, self.lines = path, iter(stream), lines
        self.resolver = _Yaml12Resolver()
        self.refused: dict[Loc, Problem] = {}
        self.refused_more = 0

    def _refuse(self, loc: Loc, line: int | None, message: str, hint: str, shown_at: Loc | None = None) -> _LeftOut:
        """A value that cannot be kept: its problem noted (the first MAX_PROBLEMS_LISTED), the
        value left out, and reading goes on. `loc` keys it (validation says nothing under it);
        `shown_at` is where the problem says it is, when not there."""
        if len(self.refused) < MAX_PROBLEMS_LISTED:
            self.refused.setdefault(loc, Problem(str(self.path), line, dotted(shown_at or loc), message, hint))
        else:
            self.refused_more += 1
        return _LEFT_OUT

    def document(self) -> Any:
        """The file's one document (None when it is empty)."""
        documents, root = 0, None
        for event in self.events:
            if isinstance(event, events.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise refuse(self.path, _line(event), "a second YAML document (`---`)",
                                 "one file holds one lab or one scenario")
            elif isinstance(event, events.NodeEvent):
                root = self._value(event, (), 0)
        return root

    def _value(self, event: events.Event, loc: Loc, depth: int) -> Any:
        line = _line(event)
        if isinstance(event, events.AliasEvent) or getattr(event, "anchor", None):
            raise refuse(self.path, line, "YAML anchors and aliases (&name, *name) are not supported",
                         "write the value out where it is used")
        tag = getattr(event, "tag", None)
        if tag and tag != "!":  # "!": a quoted scalar's own
            raise refuse(self.path, line, f"YAML tag {str(tag).replace(_TAG, '!!')} is not supported",
                         "write the plain value, without the tag")
        if isinstance(event, events.ScalarEvent):
            if not event.style and (wrong := _wrong_number(event.value)):  # plain (None or ""): may be a number
                return self._refuse(loc, line, *wrong)
            return _scalar(self.resolver.resolve(nodes.ScalarNode, event.value, event.implicit).suffix, event.value)
        if depth >= MAX_DEPTH:
            raise refuse(self.path, line, f"nested more than {MAX_DEPTH} levels deep",
                         "lab and scenario files nest a few levels: is this the right file?")
        if isinstance(event, events.SequenceStartEvent):
            return self._sequence(loc, depth + 1)
        return self._mapping(loc, depth + 1)

    def _sequence(self, loc: Loc, depth: int) -> list:
        items: list[Any] = []
        for event in self.events:
            if isinstance(event, events.SequenceEndEvent):
                break
            here = loc + (len(items),)
            self.lines[here] = _line(event)
            value = self._value(event, here, depth)
            items.append(None if value is _LEFT_OUT else value)  # the others keep their places
        return items

    def _mapping(self, loc: Loc, depth: int) -> dict:
        result: dict[str, Any] = {}
        for event in self.events:
            if isinstance(event, events.MappingEndEvent):
                break
            line = _line(event)
            if not isinstance(event, (events.ScalarEvent, events.AliasEvent)):
                raise refuse(self.path, line, "a key must be a plain name, not a list or mapping",
                             "write `key: value`")
            key = self._value(event, loc + (str(getattr(event, "value", "")),), depth)
            if key is _LEFT_OUT:  # a key such as 1e400: its value is read and left out with it
                self._value(next(self.events), loc, depth)
                continue
            key = str(key)
            here = loc + (key,)
            if key in result or here in self.refused:
                self._refuse(here + ("again",), line, f"key '{shown_name(key)}' appears twice (also line "
                             f"{self.lines[here]})", "keep one of them", shown_at=here)
                self._value(next(self.events), here + ("again",), depth)  # read, and left out: the first stands
                continue
            self.lines[here] = line
            value = self._value(next(self.events), here, depth)
            if value is not _LEFT_OUT:
                result[key] = value
        return result


def _line(event: events.Event) -> int | None:
    return event.start_mark.line + 1 if event.start_mark else None


class _LeftOut:
    """The value of a refused scalar: left out of the document (a list keeps None in its place)."""


_LEFT_OUT = _LeftOut()


def _wrong_number(value: str) -> tuple[str, str] | None:
    """(message, hint) for a plain scalar no setting can take as a number, else None."""
    if _NOT_FINITE.fullmatch(value):
        return f"{value} is not a finite number", "write a number, e.g. 100"
    if _NUMBER.fullmatch(value):
        if len(value) > MAX_NUMBER_CHARS:
            return (f"a number of {len(value)} characters ({clipped(value, 12)})",
                    f"no setting takes a number longer than {MAX_NUMBER_CHARS} characters")
        try:
            if not math.isfinite(float(value.replace("_", ""))):
                return f"{value} is too large to be a number", "write a smaller number"
        except ValueError:
            pass  # hexadecimal, octal: YAML's own rules decide
    return None


def _scalar(tag: str, value: str) -> Any:
    """A scalar by the tag YAML 1.2's core schema resolved for it (explicit tags were refused)."""
    if tag == _TAG + "null":
        return None
    if tag == _TAG + "bool":
        return value.lower() == "true"
    if tag == _TAG + "int":
        digits = value.replace("_", "")
        base = 0 if digits.lstrip("+-")[:2].lower() in ("0x", "0o", "0b") else 10
        try:
            return int(digits, base)
        except ValueError:
            return value  # a form Python does not read: validation refuses the text with its key
    if tag == _TAG + "float":
        try:
            return float(value.replace("_", ""))
        except ValueError:
            return value
    return value  # str, and a timestamp or anything else as the text it is


def dotted(loc: Loc) -> str:
    return ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")


def _model_at(model: type[pydantic.BaseModel], loc: Loc) -> type[pydantic.BaseModel] | None:
    """The pydantic model class that owns the mapping at `loc` (for key hints)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, pydantic.BaseModel)):
            return None
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, pydantic.BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """list[X] / X | None / Annotated[X, ...] -> X (first model found)."""
    for arg in typing.get_args(annotation) or ():
        inner = _unwrap(arg)
        if isinstance(inner, type) and issubclass(inner, pydantic.BaseModel):
            return inner
    return annotation


def problems_from_validation(exc: pydantic.ValidationError, model: type[pydantic.BaseModel],
                             path: str, source: SourceMap, skip: tuple[Loc, ...] = ()) -> list[Problem]:
    """The first MAX_PROBLEMS_LISTED of the errors as located problems (each costs a fuzzy match);
    none at or under a location in `skip`."""
    problems = []
    for err in exc.errors()[:MAX_PROBLEMS_LISTED]:
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        if any(loc[:len(left)] == left for left in skip):
            continue
        kind = err["type"]
        owner = _model_at(model, loc[:-1])
        if kind == "extra_forbidden":
            valid = sorted(owner.model_fields) if owner else []
            guess = closest(str(loc[-1]), valid)
            hint = key_note(loc[-1]) + (f"did you mean '{guess}'? " if guess else "") + \
                f"valid keys here: {', '.join(valid)}"
            problems.append(Problem(path, source.line(loc), dotted(loc), "unknown key", hint))
            continue
        field = owner.model_fields.get(loc[-1]) if owner and loc and isinstance(loc[-1], str) else None
        if field is None:  # an item of a list (detectors[0]: not a mapping): what the list holds
            keys = [i for i, part in enumerate(loc) if isinstance(part, str)]
            parent = _model_at(model, loc[:keys[-1]]) if keys else None
            field = parent.model_fields.get(loc[keys[-1]]) if parent else None
        hint = field.description if field is not None else None
        if kind == "missing":
            message = "required key is missing"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if "input" in err and not isinstance(err["input"], (dict, list)):
                message += f" (got {err['input']!r})"
        problems.append(Problem(path, source.line(loc), dotted(loc), message, hint))
    return problems


def validate(model: type[pydantic.BaseModel], data: Any, path: str, source: SourceMap):
    """The document as `model`, or a LabFileError with every problem: the values the reader left out
    (SourceMap.refused) and the schema's, in file order, none of the schema's under a value left out."""
    try:
        valid = model.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = problems_from_validation(exc, model, path, source, skip=tuple(source.refused))
        more = max(0, exc.error_count() - MAX_PROBLEMS_LISTED)
        if not source.refused:
            raise LabFileError(problems, more=more) from None
        raise LabFileError.in_file_order([*source.refused.values(), *problems], more + source.refused_more) from None
    if (refused := source.refusal()) is not None:
        raise refused
    return valid
