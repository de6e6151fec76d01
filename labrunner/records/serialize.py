"""The one way a record becomes its JSON, and is read back from it.

Every record is a dataclass; its JSON follows from its fields and their type hints, so no record
writes a `to_json` or `from_json` of its own. What the JSON says differently from the fields is
declared where the field is (`key(...)` in its metadata) or in the class's `json_layout`:

- a key renamed (`key(name="T")`), left out when None or empty (`omit_none`, `omit_empty`), or left
  out unless an attribute of the record is true (`only_if="gpu"`);
- a nested record's keys, or a dict's items, written among the record's own (`inline`); an inline
  dict is also where the keys no field names are read back into (a gate's calibration entry);
- raw samples, written only where asked (`samples`: a worker's reply, whose rounds are pooled),
  never into a result; an unmeasurable figure, infinite in Python, written as null
  (`null_is_infinity`: JSON has no infinity);
- a field the JSON does not carry, recovered from the whole object (`read_as`), or a key older files
  lack, read as a given value (`absent=""`);
- the order of the keys, and the figures derived from the fields (TFLOP/s, a fraction of the
  device copy): `json_layout` lists the attributes in the order they are written, and a name in it
  that is no field is a figure, computed once by the record's own property, written, never read
  back (`figure(...)` where a figure is left out when empty).

Reading is strict where the JSON came from a file: a key no field claims, a missing one without a
default (a key that may be null reads as null where absent), or a value of the wrong type is a
`RecordError` that names the record and the key path.
Values are kept as JSON gave them (an int where a float is hinted stays an int), so a record read
back writes the same bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

R = TypeVar("R")

_RULE = "labrunner.records.serialize"


class RecordError(ValueError):
    """JSON that is not the record it was read as: which record, which key, and what was wrong."""


NOTHING: Any = object()  # no `absent` value: a missing key without a default is an error


@dataclass(frozen=True)
class KeyRule:
    """How one field appears in the JSON (see the module's docstring)."""

    name: str | None = None
    omit_none: bool = False
    omit_empty: bool = False
    only_if: str | None = None
    inline: bool = False
    samples: bool = False
    null_is_infinity: bool = False
    read_as: Callable[[Mapping[str, Any]], Any] | None = None
    absent: Any = NOTHING  # what a key an older file lacks reads as, for a field the constructor requires


def key(**rule: Any) -> dict[str, KeyRule]:
    """A field's metadata: `field(default=None, metadata=key(omit_none=True))`."""
    return {_RULE: KeyRule(**rule)}


@dataclass(frozen=True)
class Figure:
    """A derived figure in a `json_layout`: the record's property `name`, left out where empty."""

    name: str
    omit_empty: bool = False


def figure(name: str, omit_empty: bool = False) -> Figure:
    return Figure(name, omit_empty)


NO_RULE = KeyRule()


def rule_of(f: dataclasses.Field[Any]) -> KeyRule:
    rule: KeyRule = f.metadata.get(_RULE, NO_RULE)
    return rule


def json_key(f: dataclasses.Field[Any]) -> str:
    return rule_of(f).name or f.name


# --- writing --------------------------------------------------------------------------------------


def layout(cls: type) -> tuple[str | Figure, ...]:
    """The attributes a record writes, in order: its `json_layout`, else its fields."""
    declared: tuple[str | Figure, ...] | None = getattr(cls, "json_layout", None)
    return declared if declared is not None else tuple(f.name for f in dataclasses.fields(cls))


def to_json(record: Any, include_samples: bool = False) -> dict[str, Any]:
    """The record's JSON object: its layout's keys in order, nested records written the same way."""
    fields = {f.name: f for f in dataclasses.fields(record)}
    data: dict[str, Any] = {}
    for entry in layout(type(record)):
        if isinstance(entry, Figure) or entry not in fields:
            name = entry.name if isinstance(entry, Figure) else entry
            value = getattr(record, name)
            if not (isinstance(entry, Figure) and entry.omit_empty and not value):
                data[name] = write(value, include_samples)
            continue
        f = fields[entry]
        rule = rule_of(f)
        value = getattr(record, f.name)
        if omitted(record, rule, value, include_samples):
            continue
        if rule.null_is_infinity and isinstance(value, float) and not math.isfinite(value):
            value = None
        if rule.inline:
            data.update(write(value, include_samples))
        else:
            data[json_key(f)] = write(value, include_samples)
    return data


def omitted(record: Any, rule: KeyRule, value: Any, include_samples: bool) -> bool:
    return (
        (rule.samples and not include_samples)
        or (rule.omit_none and value is None)
        or (rule.omit_empty and not value)
        or (rule.only_if is not None and not getattr(record, rule.only_if))
    )


def write(value: Any, include_samples: bool = False) -> Any:
    """A value as JSON holds it: a record as its object, a tuple as a list, the rest as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value, include_samples)
    if isinstance(value, dict):
        return {name: write(item, include_samples) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [write(item, include_samples) for item in value]
    return value


# --- reading --------------------------------------------------------------------------------------


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def inline_type(hint: Any) -> Any:
    """The type an inline field holds, its `| None` removed."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] if is_union(hint) else [hint]
    return args[0]


@functools.cache
def known_keys(cls: type) -> tuple[frozenset[str], bool]:
    """Every key a record's JSON may hold (its fields', its inline records', its figures'), and whether
    an inline dict takes any other key (then no key is unknown)."""
    keys: set[str] = set()
    open_ended = False
    written = set(layout(cls))
    for f in dataclasses.fields(cls):
        rule = rule_of(f)
        if f.name not in written:
            continue  # not in the JSON: a default, or recovered from the whole object (`read_as`)
        if rule.inline:
            inner = inline_type(hints(cls)[f.name])
            if dataclasses.is_dataclass(inner):
                inner_keys, inner_open = known_keys(inner)  # type: ignore[arg-type]
                keys |= inner_keys
                open_ended = open_ended or inner_open
            else:
                open_ended = True
        else:
            keys.add(json_key(f))
    fields = {f.name for f in dataclasses.fields(cls)}
    for entry in layout(cls):
        if isinstance(entry, Figure) or entry not in fields:
            keys.add(entry.name if isinstance(entry, Figure) else entry)
    return frozenset(keys), open_ended


def from_json(cls: type[R], data: Any, outer: frozenset[str] = frozenset()) -> R:
    """The record `cls` read from its JSON object; `outer` are keys a record around an inline one claims."""
    if not isinstance(data, Mapping):
        raise RecordError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    record_type: type = cls
    hinted = hints(record_type)
    own_keys, open_ended = known_keys(record_type)
    written = set(layout(cls))
    values: dict[str, Any] = {}
    catch_all: dataclasses.Field[Any] | None = None
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        rule = rule_of(f)
        if not f.init:
            continue  # a constant or a figure of the record's own: written, never read
        if rule.read_as is not None:
            values[f.name] = rule.read_as(data)
        elif f.name not in written:
            continue
        elif rule.inline:
            inner = inline_type(hinted[f.name])
            if not dataclasses.is_dataclass(inner):
                catch_all = f
                continue
            inner_keys, _ = known_keys(inner)  # type: ignore[arg-type]
            if inner_keys & set(data) or not has_default(f):
                values[f.name] = from_json(inner, data, outer | (own_keys - inner_keys))  # type: ignore[arg-type]
        elif json_key(f) in data:
            value = data[json_key(f)]
            if rule.null_is_infinity and value is None:
                value = math.inf
            try:
                values[f.name] = read(hinted[f.name], value)
            except RecordError as exc:
                raise RecordError(f"{cls.__name__}: {json_key(f)}: {exc}") from None
        elif has_default(f):
            continue
        elif rule.absent is not NOTHING:
            values[f.name] = rule.absent
        elif may_be_none(hinted[f.name]):
            values[f.name] = None  # an older file's, or a figure not taken: absent reads as null
        else:
            raise RecordError(f"{cls.__name__}: the key {json_key(f)!r} is missing")
    if catch_all is not None:
        rest = {k: v for k, v in data.items() if k not in own_keys and k not in outer}
        if rest or not has_default(catch_all):
            values[catch_all.name] = read(hinted[catch_all.name], rest)
    elif not open_ended:
        unknown = sorted(set(data) - own_keys - outer)
        if unknown:
            raise RecordError(f"{cls.__name__}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    return cls(**values)


def has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def may_be_none(hint: Any) -> bool:
    return is_union(hint) and type(None) in typing.get_args(hint)


def is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def read(hint: Any, value: Any) -> Any:
    """`value`, from JSON, as the type `hint` says; a record read as one, a list as a tuple where hinted."""
    if hint is Any or hint is object:
        return value
    if is_union(hint):
        return read_union(typing.get_args(hint), value)
    if hint is type(None):
        if value is not None:
            raise RecordError(f"expected null, got {shown(value)}")
        return None
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value)  # type: ignore[arg-type]
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise RecordError(f"expected a list, got {shown(value)}")
        item = args[0] if args else Any
        items = [read(item, v) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is dict or typing.is_typeddict(hint):
        if not isinstance(value, Mapping):
            raise RecordError(f"expected an object, got {shown(value)}")
        item = args[1] if len(args) == 2 else Any
        return {name: read(item, v) for name, v in value.items()}
    if hint in (int, float, str, bool):
        if not fits(hint, value):
            raise RecordError(f"expected {hint.__name__}, got {shown(value)}")
        return value
    raise RecordError(f"no JSON form for the type {hint!r}")


def read_union(options: tuple[Any, ...], value: Any) -> Any:
    """The first of the union's types that reads the value (None where the union holds None)."""
    if value is None and type(None) in options:
        return None
    problems = []
    for option in options:
        if option is type(None):
            continue
        try:
            return read(option, value)
        except RecordError as exc:
            problems.append(str(exc))
    raise RecordError("; ".join(problems))


def fits(hint: type, value: Any) -> bool:
    """Whether a JSON value is of a scalar type: bool is no number, an int is a float (JSON writes 2.0 as 2)."""
    if isinstance(value, bool):
        return hint is bool
    if hint is float:
        return isinstance(value, (int, float))
    return isinstance(value, hint)


def shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


# --- the methods every record has -----------------------------------------------------------------


class JsonRecord:
    """A record's `to_json` and `from_json`, both this module's: a record class declares no JSON of its own."""

    json_layout: ClassVar[tuple[str | Figure, ...] | None] = None

    def to_json(self, include_samples: bool = False) -> dict[str, Any]:
        return to_json(self, include_samples)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return from_json(cls, data)
