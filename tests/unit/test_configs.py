"""Typed backend configs: they match their constructors, refuse typos by name, and build real backends."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import sandboxkit
from sandboxkit import InvalidRequest, SandboxPool, Status
from sandboxkit.configs import (
    BUILTIN_CONFIGS,
    BaseBackendConfig,
    DaytonaConfig,
    DockerConfig,
    RayConfig,
    SubprocessConfig,
    parse_backend_config,
)
from sandboxkit.registry import BackendSpec, available_backends, backend_config, parse_backend_options


def _constructor_keywords(name: str) -> dict[str, Any]:
    factory = available_backends()[name].load()
    params = inspect.signature(factory).parameters.values()
    return {
        p.name: p.default for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
    }


@pytest.mark.parametrize("name", sorted(BUILTIN_CONFIGS))
def test_config_fields_and_defaults_match_the_backend_constructor(name: str) -> None:
    """Guard against drift: a constructor option added or renamed without its config fails here."""
    model = BUILTIN_CONFIGS[name]
    keywords = _constructor_keywords(name)
    assert model.option_names() == sorted(keywords), f"{model.__name__} and the {name} constructor disagree"
    for option, default in keywords.items():
        field_default = model.model_fields[option].default
        assert field_default == default, f"{model.__name__}.{option} defaults to {field_default!r}, not {default!r}"


@pytest.mark.parametrize("name", sorted(BUILTIN_CONFIGS))
def test_every_builtin_backend_declares_its_config(name: str) -> None:
    spec = available_backends()[name]
    assert spec.load_config() is BUILTIN_CONFIGS[name]
    assert BUILTIN_CONFIGS[name]().kind == name


def test_a_typo_is_an_invalid_request_naming_the_valid_keys() -> None:
    with pytest.raises(InvalidRequest) as info:
        sandboxkit.backend("subprocess", disk_mbb=64)
    message = str(info.value)
    assert "'disk_mbb'" in message and "did you mean 'disk_mb'" in message
    assert f"Valid options: {', '.join(SubprocessConfig.option_names())}" in message
    assert {"disk_mb", "path", "root", "tmp_mb", "warm_python"} <= set(SubprocessConfig.option_names())
    with pytest.raises(InvalidRequest, match=r"option 'tmp_mb'=0: Input should be greater than 0"):
        SandboxPool("subprocess", backend_options={"tmp_mb": 0})


async def test_a_config_builds_the_pool_and_its_options_reach_the_backend() -> None:
    config = SubprocessConfig(warm_python=False, tmp_mb=32)
    async with SandboxPool(config, max_concurrency=2) as pool:
        result = await pool.run("print(6 * 7)")
        assert pool.backend.name == "subprocess"
        assert pool.backend.warm_python is False  # type: ignore[attr-defined]
        assert pool.backend.tmp_mb == 32  # type: ignore[attr-defined]
    assert result.status is Status.OK and result.stdout == "42\n"


def test_only_the_options_set_are_passed_on() -> None:
    # An unset option lets the constructor apply its own fallback (an environment variable, say).
    assert DockerConfig(image="python:3.12").options() == {"image": "python:3.12"}
    assert DockerConfig().options() == {}


def test_backend_options_override_a_config() -> None:
    merged = backend_config(SubprocessConfig(disk_mb=64), {"tmp_mb": 32})
    assert merged == SubprocessConfig(disk_mb=64, tmp_mb=32)


def test_a_mapping_with_a_kind_parses_to_its_config() -> None:
    assert parse_backend_config({"kind": "docker", "image": "x"}) == DockerConfig(image="x")
    assert backend_config({"kind": "daytona", "ttl_minutes": 5}) == DaytonaConfig(ttl_minutes=5)
    with pytest.raises(ValidationError):
        parse_backend_config({"kind": "dokcer"})
    with pytest.raises(InvalidRequest, match="needs a 'kind'"):
        backend_config({"image": "x"})
    with pytest.raises(sandboxkit.BackendNotFound, match="dokcer"):
        backend_config({"kind": "dokcer"})


def test_secrets_never_show_in_reprs_or_dumps() -> None:
    config = DaytonaConfig(api_key="sk-very-secret")
    assert "sk-very-secret" not in repr(config) and "sk-very-secret" not in config.model_dump_json()
    assert config.options()["api_key"].get_secret_value() == "sk-very-secret"


def test_ray_checks_a_builtin_inner_backends_options_early() -> None:
    assert RayConfig(inner="docker", inner_options={"image": "x"}).inner_options == {"image": "x"}
    with pytest.raises(
        InvalidRequest, match=r"inner_options of 'docker': unknown option 'imgae'.*did you mean 'image'"
    ):
        backend_config("ray", {"inner": "docker", "inner_options": {"imgae": "x"}})


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["image=123"], {"image": "123"}),  # a string option keeps a number-like string
        (["workdir_size_mb=64", "python_fast=false"], {"workdir_size_mb": 64, "python_fast": False}),
        (['labels={"team": "rl"}'], {"labels": {"team": "rl"}}),
        (["base_url=unix:///var/run/docker.sock"], {"base_url": "unix:///var/run/docker.sock"}),
    ],
)
def test_command_line_options_are_typed_by_the_config(items: list[str], expected: dict[str, Any]) -> None:
    assert parse_backend_options("docker", items) == expected


def test_command_line_options_null_and_bad_shapes() -> None:
    assert parse_backend_options("daytona", ["ttl_minutes=null"]) == {"ttl_minutes": None}
    with pytest.raises(InvalidRequest, match="KEY=VALUE; valid keys of 'subprocess': disk_mb"):
        parse_backend_options("subprocess", ["novalue"])
    with pytest.raises(InvalidRequest, match="'languages'='python': Input should be a valid list"):
        parse_backend_options("sandbox_fusion", ["languages=python"])


class _PluginBackend:
    """Stands in for a third-party backend class: the registry only calls it with the options."""

    def __init__(self, greeting: str = "hi") -> None:
        self.greeting = greeting


class _PluginConfig(BaseBackendConfig):
    kind: str = "typed_plugin"
    greeting: str = "hi"


def test_a_plugin_may_declare_a_config() -> None:
    sandboxkit.registry.register(BackendSpec(name="typed_plugin", factory=_PluginBackend, config=_PluginConfig))  # type: ignore[arg-type]
    built = sandboxkit.backend("typed_plugin", greeting="yo")
    assert isinstance(built, _PluginBackend) and built.greeting == "yo"
    assert isinstance(sandboxkit.backend(_PluginConfig(greeting="hey")), _PluginBackend)
    with pytest.raises(InvalidRequest, match=r"unknown option 'greting' \(did you mean 'greeting'\?\)"):
        parse_backend_options("typed_plugin", ["greting=x"])


def test_a_plugin_without_a_config_keeps_plain_keyword_options() -> None:
    sandboxkit.registry.register(BackendSpec(name="plain_plugin", factory=_PluginBackend))  # type: ignore[arg-type]
    assert parse_backend_options("plain_plugin", ["greeting=1"]) == {"greeting": 1}  # JSON where it parses, unchecked
    assert sandboxkit.backend("plain_plugin", greeting="yo").greeting == "yo"  # type: ignore[attr-defined]
    with pytest.raises(InvalidRequest, match="rejected its options"):  # the constructor's TypeError, as before
        sandboxkit.backend("plain_plugin", greting="yo")


def test_a_plugin_naming_a_wrong_config_is_unavailable() -> None:
    sandboxkit.registry.register(BackendSpec(name="bad_cfg", factory=_PluginBackend, config="json:loads"))  # type: ignore[arg-type]
    with pytest.raises(sandboxkit.BackendUnavailable, match="is not a BaseBackendConfig subclass"):
        sandboxkit.registry.config_model("bad_cfg")


def test_configs_import_no_sdk() -> None:
    code = (
        "import sys, json; from sandboxkit.configs import DaytonaConfig, E2BConfig, DockerConfig, RayConfig;"
        "DaytonaConfig(api_key='k'); E2BConfig(); DockerConfig(); RayConfig(inner='docker');"
        "print(json.dumps([m for m in ('daytona', 'e2b', 'docker', 'ray') if m in sys.modules]))"
    )
    assert json.loads(subprocess.check_output([sys.executable, "-c", code], text=True)) == []


_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(
    image=_text, workdir_size_mb=st.integers(1, 10**6), python_fast=st.booleans(), labels=st.dictionaries(_text, _text)
)
def test_command_line_values_round_trip_through_the_config(
    image: str, workdir_size_mb: int, python_fast: bool, labels: dict[str, str]
) -> None:
    """A string option keeps exactly the text typed (even '123' or 'null'); others parse to their type."""
    items = [
        f"image={image}",
        f"workdir_size_mb={workdir_size_mb}",
        f"python_fast={str(python_fast).lower()}",
        f"labels={json.dumps(labels)}",
    ]
    assert parse_backend_options("docker", items) == {
        "image": image,
        "workdir_size_mb": workdir_size_mb,
        "python_fast": python_fast,
        "labels": labels,
    }
