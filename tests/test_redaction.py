"""Credentials never reach the operator's channels: errors, logs, store descriptions, repr."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from idemtools import Policy, Registry, shared
from idemtools.engine import Engine, ToolCall
from idemtools.engine.store_calls import store_name
from idemtools.outcome import Outcome
from idemtools.redaction import MASK, redact_url, withhold
from idemtools.stores import MemoryStore, from_url
from tests.budget import examples

pytestmark = pytest.mark.sdk_free

# Letters that no message, host or option name here spells in runs of four: a leaked fragment
# of a password is then found by looking for its runs, not only for the whole of it.
LETTERS = "QXZJKVW"
SPECIALS = "#?/@:%&=+ !;,$"
passwords = st.text(alphabet=LETTERS + SPECIALS, min_size=6, max_size=24).filter(
    lambda p: sum(c in LETTERS for c in p) >= 4
)


def _fragments(password: str) -> set[str]:
    """The password and each run of 4+ of its letters: what a leak would show."""
    found = {password, quote(password, safe=""), quote_plus(password)}
    run = ""
    for c in password + " ":
        if c in LETTERS:
            run += c
            continue
        if len(run) >= 4:
            found.add(run)
        run = ""
    return found


def assert_clean(text: str, password: str) -> None:
    for fragment in _fragments(password):
        assert fragment not in text, (fragment, text)


def _spellings(scheme: str, password: str) -> Iterator[str]:
    """The ways an operator writes a password into a store URL, right and wrong."""
    host = "127.0.0.1:1"
    yield f"{scheme}://app:{quote(password, safe='')}@{host}/0"  # the documented way
    yield f"{scheme}://app:{password}@{host}/0"  # not encoded
    yield f"{scheme}://:{quote(password, safe='')}@{host}/0"  # no user
    yield f"{scheme}://app@{host}/0?password={quote(password, safe='')}"
    yield f"{scheme}://app@{host}/0?password={password}"


SCHEMES = ["redis", "rediss", "unix", "redis+cluster", "postgresql", "postgres", "nosuch"]


# -- redact_url ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://app:s3cret@cache:6379/0", "redis://app:***@cache:6379/0"),
        ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
        ("redis://app@cache/0", "redis://app@cache/0"),
        ("redis://cache:6379/0?prefix=a", "redis://cache:6379/0?prefix=a"),
        ("postgresql://u@db/x?password=s3cret&sslmode=require", None),
        ("postgresql://u:p%40ss@db/x", "postgresql://u:***@db/x"),
        ("redis://u:pa/ss#w@cache/0", "redis://u:***@cache/0"),
        ("memory://", "memory://"),
        ("sqlite:///var/lib/app/idem.db", "sqlite:///var/lib/app/idem.db"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url_keeps_user_and_host_and_hides_the_password(url: str, shown: str | None) -> None:
    redacted = redact_url(url)
    assert "s3cret" not in redacted and "p%40ss" not in redacted and "pa/ss" not in redacted
    if shown is not None:
        assert redacted == shown
    else:
        # A raw "&" in the value cannot be told from the next option: hidden to the end.
        assert redacted == "postgresql://u@db/x?password=***"


@given(password=passwords, scheme=st.sampled_from(SCHEMES), form=st.integers(0, 4))
def test_redact_url_never_shows_a_password(password: str, scheme: str, form: int) -> None:
    url = list(_spellings(scheme, password))[form]
    redacted = redact_url(url)
    assert_clean(redacted, password)
    assert MASK in redacted


# -- from_url: errors, descriptions, repr ------------------------------------------------------


def _texts_of(exc: BaseException) -> Iterator[str]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield str(current)
        yield repr(current)
        yield from (str(arg) for arg in current.args)
        current = current.__cause__ or current.__context__


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(password=passwords, scheme=st.sampled_from(SCHEMES), form=st.integers(0, 4))
def test_from_url_never_echoes_a_password(password: str, scheme: str, form: int) -> None:
    url = list(_spellings(scheme, password))[form]
    try:
        store = from_url(url)
    except Exception as exc:
        for text in _texts_of(exc):
            assert_clean(text, password)
        return
    for text in (repr(store), str(store), store_name(store), getattr(store, "description", "")):
        assert_clean(text, password)


def test_a_badly_written_password_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError) as caught:
        from_url("redis://app:QX/ZJ#KV@127.0.0.1:1/0")
    message = str(caught.value)
    assert "percent-encode" in message and "redis://app:***@127.0.0.1:1/0" in message
    assert "QX" not in message and "ZJ" not in message and "KV" not in message


def test_an_at_sign_after_the_host_is_read_as_hiding_more_never_less() -> None:
    # Ambiguous: "host:6379/0?prefix=a@b" could be user "host", password "6379/0?prefix=a".
    assert "a@b" not in redact_url("redis://host:6379/0?prefix=a@b")
    with pytest.raises(ValueError, match="%40"):
        from_url("redis://host:6379/0?prefix=a@b")
    assert from_url("redis://host:6379/0?prefix=a%40b").prefix == "a@b"  # type: ignore[attr-defined]


def test_withhold_keeps_clean_text_and_drops_text_that_quotes_a_password() -> None:
    url = "redis://app:QXZJKV@h/0"
    assert withhold("Error 111 connecting to h:6379", url) == "Error 111 connecting to h:6379"
    assert "QXZJKV" not in withhold("bad password QXZJKV", url)


# -- logs while serving ------------------------------------------------------------------------


def _unreachable(scheme: str, password: str, form: int) -> str:
    quoted = quote(password, safe="")
    if scheme == "redis":
        urls = [
            f"redis://app:{quoted}@127.0.0.1:1/0",
            f"redis://app@127.0.0.1:1/0?password={quoted}",
        ]
    else:
        urls = [
            f"postgresql://app:{quoted}@127.0.0.1:1/test",
            f"postgresql://app@127.0.0.1:1/test?password={quoted}",
        ]
    return urls[form]


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(password=passwords, scheme=st.sampled_from(["redis", "postgresql"]), form=st.integers(0, 1))
async def test_store_failures_are_logged_without_the_password(
    caplog: pytest.LogCaptureFixture, password: str, scheme: str, form: int
) -> None:
    assume(scheme != "postgresql" or _has_psycopg())
    caplog.clear()
    store = from_url(_unreachable(scheme, password, form), connect_timeout=0.5, timeout=0.5)
    registry = Registry()
    registry.register("t", Policy.of(scope=shared, retention=60, lease=5))
    engine = Engine(store, registry=registry)
    ran: list[Any] = []

    async def run() -> Outcome:
        ran.append(1)
        return Outcome(result={"content": []})

    with caplog.at_level(logging.DEBUG):
        answer = await engine.handle(ToolCall("t", {}, "k-redact"), run)
        await engine.aclose()
    assert answer.error is not None and answer.error["data"]["type"] == (
        "idempotency_store_unavailable"
    )
    assert not ran
    assert caplog.records  # the failure was logged
    for record in caplog.records:
        assert_clean(record.getMessage(), password)
        if record.exc_text:
            assert_clean(record.exc_text, password)


def _has_psycopg() -> bool:
    try:
        import psycopg_pool  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_custom_store_that_describes_itself_by_its_url_is_logged_redacted() -> None:
    # Every log line naming the store goes through store_name (claim failures, the start-up
    # check): a third-party store whose description is its URL must not leak the password.
    class UrlStore(MemoryStore):
        kind = "custom"
        description = "redis://app:QXZJKVWQ@cache:6379/0"

    shown = store_name(UrlStore())
    assert "QXZJKVWQ" not in shown and "redis://app:***@cache:6379/0" in shown
