"""Wire messages for tests that must see every field carried."""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

M = TypeVar("M", bound=Message)


def filled(msg: M) -> M:
    """Every field of ``msg`` set to something other than its default (nested messages too)."""
    for i, f in enumerate(msg.DESCRIPTOR.fields, start=1):
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            getattr(msg, f.name)["K"] = "v"
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            if f.message_type.full_name == "google.protobuf.Duration":
                getattr(msg, f.name).FromNanoseconds(i * 1_000_000_123)
            else:
                filled(getattr(msg, f.name))
        elif f.type == FieldDescriptor.TYPE_ENUM:
            setattr(msg, f.name, f.enum_type.values[-1].number)
        elif f.type == FieldDescriptor.TYPE_BOOL:
            if f.is_repeated:
                getattr(msg, f.name).append(True)
            else:
                setattr(msg, f.name, True)
        elif f.type == FieldDescriptor.TYPE_STRING:
            value = f"{f.name}-{i}"
            getattr(msg, f.name).append(value) if f.is_repeated else setattr(msg, f.name, value)
        else:
            getattr(msg, f.name).append(i) if f.is_repeated else setattr(msg, f.name, i)
    return msg
