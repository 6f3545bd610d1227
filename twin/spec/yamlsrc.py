"""YAML with line numbers, and pydantic errors turned into located Problems.

Lab files and scenario files share this: the file is parsed once with ruamel's
round-trip loader (which remembers where every key sits), validated by a pydantic
model, and every validation error becomes a Problem naming file, line and key.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

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


def read_yaml(path: Path) -> tuple[Any, SourceMap]:
    """Parse a YAML file; syntax errors become a LabFileError with the line."""
    if not path.is_file():
        raise LabFileError([Problem(str(path), None, "", "file not found",
                                    "give a path to a .yaml file or a name from labs/")])
    try:
        data = YAML(typ="rt").load(path.read_text())
    except MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise LabFileError([Problem(str(path), line, "", f"YAML syntax: {exc.problem}",
                                    "check indentation and quoting on that line")]) from None
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
