"""``Chunk``'s hand-written ``__init__`` (slot setters, for speed) is the dataclass's: the
same parameters in field order with the fields' defaults, every field set, still frozen."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from app.core.output import Chunk, Finish, TokenLogprob, ToolCallChunk, Usage


def test_init_parameters_are_the_fields() -> None:
    params = list(inspect.signature(Chunk.__init__).parameters.values())[1:]
    fields = dataclasses.fields(Chunk)
    assert [p.name for p in params] == [f.name for f in fields]
    assert [p.default for p in params] == [f.default for f in fields]


def test_every_field_set_positionally_and_by_name() -> None:
    values = ("t", (1, 2), (TokenLogprob("t", -0.5),), Finish("stop"), Usage(1, 2),
              "r", (ToolCallChunk(0, "id", "f", "{}"),))
    by_position = Chunk(*values)
    by_name = Chunk(**{f.name: v for f, v in zip(dataclasses.fields(Chunk), values, strict=True)})
    assert by_position == by_name
    assert tuple(getattr(by_position, f.name) for f in dataclasses.fields(Chunk)) == values
    assert Chunk() == Chunk("", (), None, None, None, "", ())
    assert hash(Chunk("a", (1,))) == hash(Chunk(text="a", token_ids=(1,)))
    assert dataclasses.replace(by_name, text="u").text == "u"
    assert repr(Chunk("a")).startswith("Chunk(text='a', token_ids=()")


def test_still_frozen() -> None:
    chunk = Chunk("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        chunk.text = "b"  # type: ignore[misc]
    assert not hasattr(chunk, "__dict__")
