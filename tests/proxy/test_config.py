"""The proxy's TOML configuration and flags: what a policy becomes, what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from idemtools.cli import main
from idemtools.proxy.config import ConfigError, ProxyConfig, duration, load, parse
from idemtools.proxy.scope import AuthRule, scope_named
from idemtools.scopes import by_auth_subject, shared

CONFIG = """
store = "sqlite:///tmp/x.db"
forward_key = true
shutdown_grace = "2m"

[default]
retention = "2h"
lease = 30
scope = "shared"

[tools."pay_*"]
retention = "7d"
on_lapse = "refuse"
authorize = { scopes = ["payments:write"], claims = { tenant = "acme" } }

[tools.pay_refund]
lease = "5s"

[tools."*"]
max_runtime = "10m"
"""


def test_default_rules_and_precedence(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text(CONFIG)
    config = load(path)
    assert config.store == "sqlite:///tmp/x.db" and config.forward_key is True
    assert config.shutdown_grace == 120
    assert config.default.retention == 7200 and config.default.lease == 30
    assert config.default.scope is shared
    # An exact name wins over a glob listed before it; rules inherit the default.
    refund = config.policy_for("pay_refund")
    assert refund.lease == 5 and refund.retention == 7200 and refund.authorize is None
    charge = config.policy_for("pay_charge")
    assert charge.retention == 7 * 86400 and charge.lease == 30
    assert isinstance(charge.authorize, AuthRule)
    assert charge.authorize.scopes == ("payments:write",)
    # Globs in file order: "pay_*" before "*".
    assert charge.max_runtime == 3600
    assert config.policy_for("other").max_runtime == 600
    # on_lapse: "refuse" where a table says so ("pay_refund" starts from [default]).
    assert charge.on_lapse == "refuse"
    assert config.default.on_lapse == refund.on_lapse == "rerun"
    assert parse({"default": {"on_lapse": "refuse"}}).policy_for("x").on_lapse == "refuse"


def test_no_file_means_library_defaults() -> None:
    config = ProxyConfig()
    policy = config.policy_for("anything")
    assert policy.retention == 86400 and policy.lease == 60 and policy.max_runtime == 3600
    assert policy.scope is by_auth_subject
    assert config.store is None and config.forward_key is False  # the transport's default


def test_flags_override_the_default_and_keep_the_rules() -> None:
    config = parse({"tools": {"slow_*": {"retention": 60}}})
    over = config.with_overrides(retention=10, scope="local", store="memory://", forward_key=True)
    assert over.default.retention == 10 and over.default.scope is scope_named("local")
    assert over.policy_for("slow_x").retention == 60
    assert over.forward_key is True


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"default": {"transactional": True}}, "'transactional' is not available"),
        ({"default": {"retension": 5}}, "unknown key(s) retension"),
        ({"tools": {"x": {"scope": "everyone"}}}, "unknown scope 'everyone'"),
        ({"default": {"retention": "soon"}}, "expected seconds or a duration"),
        ({"default": {"lease": 0}}, "more than 0"),
        ({"stores": "memory://"}, "unknown key(s) stores"),
        ({"tools": {"x": {"authorize": {"role": "admin"}}}}, "unknown key(s) role"),
        ({"forward_key": "yes"}, "forward_key must be true or false"),
        ({"tools": {"x": {"on_lapse": "retry"}}}, '[tools."x"].on_lapse: expected "rerun" or'),
        ({"default": {"on_lapse": "reconcile"}}, "a reconcile function is Python code"),
        ({"default": {"on_lapse": True}}, '[default].on_lapse: expected "rerun" or "refuse"'),
    ],
)
def test_mistakes_are_refused_naming_the_key(data: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(data, "proxy.toml")
    assert words in str(caught.value)


def test_durations() -> None:
    assert duration("90s", "x") == 90 and duration("15m", "x") == 900
    assert duration("1.5h", "x") == 5400 and duration(7, "x") == 7.0
    with pytest.raises(ConfigError):
        duration(True, "x")


def test_cli_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["proxy", "--store", "memory://"]) == 2
    assert "no upstream" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[default]\nretention = [\n")
    assert main(["proxy", "--config", str(bad), "--", "true"]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    assert main(["proxy", "--scope", "nobody", "--", "true"]) == 2
    assert "unknown scope" in capsys.readouterr().err
