"""An attempt's result is built where a type checker sees its fields."""

from __future__ import annotations

from typing import get_type_hints

from activities.make import _Run
from loop.contracts import MakeResult


def test_what_a_run_adds_to_an_attempt_is_typed_as_the_result_is() -> None:
    """``finished`` takes the run's fields by name and type (a checker sees a misspelled
    one); they must be ``MakeResult``'s own, with its types."""
    result = get_type_hints(MakeResult)
    for name, hint in get_type_hints(_Run).items():
        assert name in MakeResult.model_fields, name
        assert hint == result[name], name
