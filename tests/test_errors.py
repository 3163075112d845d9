"""The error hierarchy, `error.data` round trips, error codes and the key echo."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import idemtools
from idemtools import (
    ArgumentsInvalidError,
    ConflictError,
    ErrorCodes,
    IdempotencyError,
    InProgressError,
    InstallError,
    KeyInvalidError,
    OutcomeNotKeptError,
    OutcomeTooLargeError,
    OutcomeUnknownError,
    RecordCorruptError,
    RefusedError,
    ScopeUnavailableError,
    StoreFullError,
    StoreUnavailableError,
    UnauthorizedError,
)
from idemtools.errors import QuotaExceededError, error_from_data
from tests.budget import examples

ALL_REFUSALS: dict[str, type[RefusedError]] = {
    "idempotency_key_invalid": KeyInvalidError,
    "idempotency_arguments_invalid": ArgumentsInvalidError,
    "idempotency_key_in_progress": InProgressError,
    "idempotency_key_conflict": ConflictError,
    "idempotency_scope_unavailable": ScopeUnavailableError,
    "idempotency_unauthorized": UnauthorizedError,
    "idempotency_store_full": StoreFullError,
    "idempotency_quota_exceeded": QuotaExceededError,
    "idempotency_store_unavailable": StoreUnavailableError,
    "idempotency_record_corrupt": RecordCorruptError,
    "idempotency_outcome_too_large": OutcomeTooLargeError,
    "idempotency_outcome_not_kept": OutcomeNotKeptError,
    "idempotency_outcome_unknown": OutcomeUnknownError,
}


def test_every_refusal_is_listed() -> None:
    # A new RefusedError subclass must be added to this table (and to error_from_data).
    def subclasses(cls: type[RefusedError]) -> set[type[RefusedError]]:
        out: set[type[RefusedError]] = set(cls.__subclasses__())
        for sub in list(out):
            out |= subclasses(sub)
        return out

    public = {c for c in subclasses(RefusedError) if c.__module__ == "idemtools.errors"}
    assert public == set(ALL_REFUSALS.values())
    assert {cls.type for cls in public} == set(ALL_REFUSALS)


@pytest.mark.parametrize(("error_type", "cls"), sorted(ALL_REFUSALS.items()))
def test_hierarchy_and_type(error_type: str, cls: type[RefusedError]) -> None:
    assert cls.type == error_type
    assert issubclass(cls, RefusedError)
    assert issubclass(cls, IdempotencyError)
    assert issubclass(cls, Exception)
    assert getattr(idemtools, cls.__name__) is cls
    error = cls("went wrong", key="k-1")
    assert str(error) == "went wrong"
    assert error.message == "went wrong"
    assert error.key == "k-1"


def test_install_error_is_not_a_refusal() -> None:
    assert issubclass(InstallError, IdempotencyError)
    assert not issubclass(InstallError, RefusedError)


# The refusals of a request the tool provably did not run for (`data.notProcessed: true`); the
# others stand for a call that ran or may have run.
NOT_PROCESSED_TYPES = {
    "idempotency_key_in_progress",
    "idempotency_key_conflict",
    "idempotency_key_invalid",
    "idempotency_arguments_invalid",
    "idempotency_scope_unavailable",
    "idempotency_unauthorized",
    "idempotency_quota_exceeded",
    "idempotency_store_full",
    "idempotency_store_unavailable",
}
NEVER_NOT_PROCESSED = {
    "idempotency_outcome_unknown",
    "idempotency_outcome_not_kept",
    "idempotency_outcome_too_large",
    "idempotency_record_corrupt",
}


def test_every_refusal_type_is_classified_for_not_processed() -> None:
    assert set(ALL_REFUSALS) == NOT_PROCESSED_TYPES | NEVER_NOT_PROCESSED
    assert not NOT_PROCESSED_TYPES & NEVER_NOT_PROCESSED


def test_a_rebuilt_error_reflects_the_wire_not_its_class() -> None:
    """A client sees what the server sent: a refusal without the hint rebuilds without it."""
    rebuilt = error_from_data("m", {"type": "idempotency_key_conflict", "idempotencyKey": "k"})
    assert rebuilt is not None and rebuilt.not_processed is False
    assert "notProcessed" not in rebuilt.data
    odd = error_from_data("m", {"type": "idempotency_outcome_unknown", "notProcessed": True})
    assert odd is not None and odd.not_processed is True  # reported as received, a hint only


@pytest.mark.parametrize(("error_type", "cls"), sorted(ALL_REFUSALS.items()))
def test_data_round_trip(error_type: str, cls: type[RefusedError]) -> None:
    error = (
        InProgressError("m", key="k", retry_after_ms=1234)
        if cls is InProgressError
        else cls("m", key="k")
    )
    data = error.data
    assert data["type"] == error_type
    assert data["idempotencyKey"] == "k"
    extra = {"notProcessed"} if error_type in NOT_PROCESSED_TYPES else set()
    if cls is InProgressError:
        assert data["retryAfterMs"] == 1234
        extra.add("retryAfterMs")
    assert set(data) == {"type", "idempotencyKey", *extra}
    assert data.get("notProcessed", True) is True  # present as true, or absent
    wire = json.loads(json.dumps(data))  # what a client receives
    rebuilt = error_from_data("m", wire)
    assert type(rebuilt) is cls
    assert rebuilt is not None
    assert rebuilt.data == data
    assert rebuilt.key == "k"
    assert str(rebuilt) == "m"


@settings(max_examples=examples(200), deadline=None)
@given(
    st.sampled_from(sorted(ALL_REFUSALS)), st.text(min_size=1, max_size=64), st.integers(1, 10**6)
)
def test_data_round_trip_property(error_type: str, key: str, retry: int) -> None:
    cls = ALL_REFUSALS[error_type]
    error = (
        cls("m", key=key)
        if cls is not InProgressError
        else InProgressError("m", key=key, retry_after_ms=retry)
    )
    rebuilt = error_from_data("m", error.data)
    assert rebuilt is not None and type(rebuilt) is cls
    assert rebuilt.data == error.data


@pytest.mark.parametrize(
    "data",
    [
        None,
        "idempotency_key_conflict",
        ["idempotency_key_conflict"],
        {},
        {"type": "something_else"},
        {"type": None},
        {"idempotencyKey": "k"},
        {"type": "idempotency_error"},  # the abstract base's type
    ],
)
def test_foreign_data_is_not_ours(data: Any) -> None:
    assert error_from_data("m", data) is None


@pytest.mark.parametrize("retry", [None, "100", 1.5, [1]])
def test_in_progress_with_a_malformed_retry_after(retry: Any) -> None:
    data = {"type": "idempotency_key_in_progress", "idempotencyKey": "k", "retryAfterMs": retry}
    rebuilt = error_from_data("m", data)
    assert isinstance(rebuilt, InProgressError)
    assert rebuilt.retry_after_ms == 0


def test_in_progress_without_retry_after() -> None:
    rebuilt = error_from_data("m", {"type": "idempotency_key_in_progress"})
    assert isinstance(rebuilt, InProgressError)
    assert rebuilt.retry_after_ms == 0
    assert rebuilt.key is None


# --------------------------------------------------------------------------------------------
# ErrorCodes
# --------------------------------------------------------------------------------------------


def test_every_type_has_a_code() -> None:
    codes = ErrorCodes()
    fields = {f.name for f in dataclasses.fields(ErrorCodes)}
    assert fields == set(ALL_REFUSALS)
    for error_type in fields:
        assert codes.code_for(error_type) == getattr(codes, error_type)


# The default codes besides -32602 (docs/how-it-works.md prints this table).
DEFAULT_CODES = {
    "idempotency_key_in_progress": -31051,
    "idempotency_key_conflict": -31052,
    "idempotency_scope_unavailable": -31053,
    "idempotency_store_full": -31054,
    "idempotency_store_unavailable": -31055,
    "idempotency_record_corrupt": -31056,
    "idempotency_outcome_too_large": -31057,
    "idempotency_quota_exceeded": -31058,
    "idempotency_unauthorized": -31059,
    "idempotency_outcome_not_kept": -31060,
    "idempotency_outcome_unknown": -31061,
}


def test_default_codes() -> None:
    codes = ErrorCodes()
    assert codes.idempotency_key_invalid == -32602
    assert codes.idempotency_arguments_invalid == -32602
    others = [f.name for f in dataclasses.fields(ErrorCodes) if not f.name.endswith("_invalid")]
    assert {name: getattr(codes, name) for name in others} == DEFAULT_CODES
    values = [getattr(codes, name) for name in others]
    assert len(set(values)) == len(values)  # distinguishable even by code


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ErrorCodes)])
def test_default_codes_lie_outside_the_reserved_range(field: str) -> None:
    # MCP 2026-07-28, basic/index "Error Codes": -32020..-32099 is reserved for codes the
    # spec defines (MUST NOT emit others from it), -32000..-32019 is legacy (SHOULD NOT), and
    # new application codes SHOULD lie outside -32768..-32000. -32602 is JSON-RPC's own
    # "Invalid params", which an invalid key or invalid arguments are.
    code = getattr(ErrorCodes(), field)
    assert code == -32602 or not -32768 <= code <= -32000, (field, code)
    assert code != -32602 or field.endswith("_invalid")


@given(st.text(max_size=40))
def test_code_for_any_type_is_a_default_or_internal_error(error_type: str) -> None:
    codes = ErrorCodes()
    defaults = {getattr(codes, f.name) for f in dataclasses.fields(ErrorCodes)}
    code = codes.code_for(error_type)
    assert code in defaults or code == -32603
    assert code == -32603 or code == -32602 or not -32768 <= code <= -32000


def test_codes_are_configurable_and_frozen() -> None:
    codes = ErrorCodes(idempotency_key_conflict=409)
    assert codes.code_for("idempotency_key_conflict") == 409
    assert codes.code_for("idempotency_key_in_progress") == ErrorCodes().idempotency_key_in_progress
    with pytest.raises(dataclasses.FrozenInstanceError):
        codes.idempotency_key_conflict = 1  # type: ignore[misc]


@pytest.mark.parametrize("unknown", ["nope", "", "code_for", "__class__", "__init__"])
def test_unknown_type_gets_internal_error(unknown: str) -> None:
    assert ErrorCodes().code_for(unknown) == -32603


# --------------------------------------------------------------------------------------------
# key echo
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "echo"),
    [
        (None, None),
        (5, 5),
        (-1.5, -1.5),
        (True, True),
        ("", ""),
        ("k" * 64, "k" * 64),
        ("k" * 65, "k" * 64 + "…"),
        ("🔑" * 100, "🔑" * 64 + "…"),  # characters, not bytes or UTF-16 units
        (["a", 1], '["a", 1]'),
        ({"k": "v" * 100}, ('{"k": "' + "v" * 100)[:64] + "…"),
    ],
)
def test_key_echo(key: object, echo: object) -> None:
    assert KeyInvalidError("m", key=key).data["idempotencyKey"] == echo


def test_key_echo_of_non_json_objects_does_not_fail() -> None:
    echo = KeyInvalidError("m", key={"x": object()}).data["idempotencyKey"]
    assert isinstance(echo, str) and len(echo) <= 65


@settings(max_examples=examples(300), deadline=None)
@given(st.text(max_size=300))
def test_key_echo_is_a_prefix_of_at_most_64_characters(key: str) -> None:
    echo = ConflictError("m", key=key).data["idempotencyKey"]
    if len(key) <= 64:
        assert echo == key
    else:
        assert echo == key[:64] + "…"


@pytest.mark.parametrize(("error_type", "cls"), sorted(ALL_REFUSALS.items()))
def test_data_is_a_plain_attribute(error_type: str, cls: type[RefusedError]) -> None:
    # `error.data` is a value, like `key` (a method would print as `<bound method ...>`).
    error = cls("m", key="k-1")
    assert isinstance(error.data, dict)
    assert error.data["type"] == error_type
    shown = f"{error.data} {error!r}"
    assert "bound method" not in shown
    assert error_type in repr(error) and "k-1" in repr(error)


def test_not_supported_error_is_client_side() -> None:
    assert issubclass(idemtools.IdempotencyNotSupportedError, IdempotencyError)
    assert not issubclass(idemtools.IdempotencyNotSupportedError, RefusedError)
    error = idemtools.IdempotencyNotSupportedError("no capability", tool="charge")
    assert (error.message, error.tool) == ("no capability", "charge")
