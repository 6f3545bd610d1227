"""YAML with line numbers, and pydantic errors turned into located Problems.

Lab files and scenario files share this: the file is parsed once with ruamel's
round-trip loader (which remembers where every key sits), validated by a pydantic
model, and every validation error becomes a Problem naming file, line and key.

Before the loader sees a file, it is bounded: at most MAX_FILE_BYTES, UTF-8 only, one
document, no anchors or aliases (a few lines of nested aliases expand to gigabytes: they are
refused from the event stream, before anything is built) and no explicit tags.
"""

from __future__ import annotations

import errno
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
from ruamel.yaml import YAML, events
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from twin.errors import closest, LabFileError, Problem

Loc = tuple[Any, ...]


@dataclass
class SourceMap:
    """Finds the line (1-based) of a key path such as ('fabric', 'tiers')."""

    root: Any

    def line(self, loc: Loc) -> int | None:
        node, best = self.root, 1
        for part in loc:
            if isinstance(node, CommentedMap) and part in node:
                best = node.lc.key(part)[0] + 1
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
                best = node.lc.item(part)[0] + 1
                node = node[part]
            else:
                break
        return best


MAX_FILE_BYTES = 1 << 20  # the largest shipped file is 3 KB; a generated one with every key fits


def _refuse(path: Path, line: int | None, message: str, hint: str) -> LabFileError:
    return LabFileError([Problem(str(path), line, "", message, hint)])


def _read_text(path: Path) -> str:
    """The file's text, or a clear error: missing, not a file, too large, not UTF-8."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, None, "symbolic link loop", "point the path at a real file") from None
        raise _refuse(path, None, "file not found", "give a path to a .yaml file or a name from labs/") from None
    if path.is_dir():
        raise _refuse(path, None, "is a directory, not a file", "give a path to a .yaml file")
    if not path.is_file():
        raise _refuse(path, None, "not a regular file", "give a path to a .yaml file")
    if size > MAX_FILE_BYTES:
        raise _refuse(path, None, f"file is {size / 1e6:.1f} MB; lab and scenario files are at most "
                      f"{MAX_FILE_BYTES >> 10} KiB", "is this the right file?")
    raw = path.read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise _refuse(path, 1, "the file is UTF-16", "save it as UTF-8")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise _refuse(path, line, f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}",
                      "save the file as UTF-8 (a latin-1 character in a comment is enough)") from None
    if "\x00" in text:
        offset = text.index("\x00")
        raise _refuse(path, text.count("\n", 0, offset) + 1, f"NUL byte at offset {offset}",
                      "is this a text file?")
    return text


def _check_events(path: Path, text: str) -> None:
    """Refuse what the loader would expand or misread, from the event stream (linear in the
    file's size: nothing is built yet)."""
    documents = 0
    for event in YAML(typ="rt").parse(text):
        line = event.start_mark.line + 1 if event.start_mark else None
        if isinstance(event, events.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise _refuse(path, line, "a second YAML document (`---`)", "one file holds one lab or one scenario")
        elif isinstance(event, events.AliasEvent) or getattr(event, "anchor", None):
            raise _refuse(path, line, "YAML anchors and aliases (&name, *name) are not supported",
                          "write the value out where it is used")
        elif getattr(event, "tag", None):  # only explicit tags: plain nodes have none
            tag = str(event.tag).replace('tag:yaml.org,2002:', '!!')
            raise _refuse(path, line, f"YAML tag {tag} is not supported", "write the plain value, without the tag")


def read_yaml(path: Path) -> tuple[Any, SourceMap]:
    """Parse a YAML file; every problem with the file itself becomes a LabFileError with the line."""
    text = _read_text(path)
    try:
        _check_events(path, text)
        data = YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise LabFileError([Problem(str(path), line, "", f"YAML syntax: {exc.problem}",
                                    "check indentation and quoting on that line")]) from None
    except YAMLError as exc:  # e.g. a control character the reader refuses
        mark = getattr(exc, "position", None)
        line = text.count("\n", 0, mark) + 1 if isinstance(mark, int) else None
        raise _refuse(path, line, f"YAML: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                      "remove control characters; save as plain UTF-8 text") from None
    if not isinstance(data, CommentedMap):
        raise LabFileError([Problem(str(path), 1, "", "the file must be a YAML mapping",
                                    "start with `name: ...`")])
    return data, SourceMap(data)


def to_plain(data: Any) -> Any:
    if isinstance(data, dict):
        return {str(k): to_plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [to_plain(v) for v in data]
    return data


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


def dotted(loc: Loc) -> str:
    return ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")


def problems_from_validation(exc: pydantic.ValidationError, model: type[pydantic.BaseModel],
                             path: str, source: SourceMap) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        kind = err["type"]
        owner = _model_at(model, loc[:-1])
        if kind == "extra_forbidden":
            valid = sorted(owner.model_fields) if owner else []
            guess = closest(str(loc[-1]), valid)
            hint = (f"did you mean '{guess}'? " if guess else "") + f"valid keys here: {', '.join(valid)}"
            problems.append(Problem(path, source.line(loc), dotted(loc), "unknown key", hint))
            continue
        field = owner.model_fields.get(loc[-1]) if owner and loc and isinstance(loc[-1], str) else None
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
    try:
        return model.model_validate(to_plain(data))
    except pydantic.ValidationError as exc:
        raise LabFileError(problems_from_validation(exc, model, path, source)) from None
