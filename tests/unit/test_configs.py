"""Typed backend configs: each option declared once, taken by its backend, typos refused by name."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError, model_validator

import sandboxkit
from sandboxkit import InvalidRequest, SandboxPool, Status
from sandboxkit.configs import (
    BUILTIN_CONFIGS,
    BaseBackendConfig,
    DaytonaConfig,
    DockerConfig,
    E2BConfig,
    RayConfig,
    SandboxFusionConfig,
    SubprocessConfig,
    parse_backend_config,
)
from sandboxkit.registry import BackendSpec, available_backends, backend_config, parse_backend_options

#: The backends whose constructors take their config (the Ray placement takes a class as ``inner``, too).
TAKE_CONFIG = ("daytona", "docker", "e2b", "sandbox_fusion", "subprocess")


@pytest.mark.parametrize("name", TAKE_CONFIG)
def test_a_backend_constructor_declares_no_option_of_its_own(name: str) -> None:
    """Each option is declared once, in the config: the constructor takes the model or keywords for it."""
    factory = available_backends()[name].load()
    params = [p for p in inspect.signature(factory).parameters.values() if p.name != "self"]
    kinds = inspect.Parameter
    assert [(p.name, p.kind) for p in params] == [
        ("config", kinds.POSITIONAL_OR_KEYWORD),
        ("options", kinds.VAR_KEYWORD),
    ]
    assert getattr(factory, "config_model", None) is BUILTIN_CONFIGS[name]


def test_a_backend_takes_its_config_as_it_is() -> None:
    from sandboxkit.backends.subprocess import SubprocessBackend

    config = SubprocessConfig(tmp_mb=32, warm_python=False)
    built = SubprocessBackend(config=config)
    assert built.config is config and built.tmp_mb == 32 and built.warm_python is False
    assert SubprocessBackend(config, tmp_mb=48).config == SubprocessConfig(tmp_mb=48, warm_python=False)


def test_keyword_options_are_validated_by_the_model_and_named_with_the_backend() -> None:
    from sandboxkit.backends.subprocess import SubprocessBackend

    assert SubprocessBackend(disk_mb=64).config == SubprocessConfig(disk_mb=64)
    with pytest.raises(InvalidRequest, match=r"backend 'subprocess' rejected its options: option 'tmp_mb'=0: "):
        SubprocessBackend(tmp_mb=0)
    with pytest.raises(InvalidRequest, match=r"unknown option 'disk_mbb' \(did you mean 'disk_mb'\?\)\. Valid options"):
        SubprocessBackend(disk_mbb=64)
    with pytest.raises(InvalidRequest, match=r"option 'preload_modules'=\['os path'\]: .*not module names"):
        SubprocessBackend(preload_modules=["os path"])
    with pytest.raises(InvalidRequest, match=r"backend 'subprocess' takes a SubprocessConfig, got DockerConfig"):
        SubprocessBackend(DockerConfig())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "options", "complaint"),
    [
        (DockerConfig, {"workdir": "work"}, "workdir must be an absolute path"),
        (SubprocessConfig, {"workdir": "/tmp/w"}, "outside /tmp, /dev, /proc and /sys"),
        (SubprocessConfig, {"workdir": "/a/../b"}, "contains '..'"),
        (DockerConfig, {"runner": "go"}, "Input should be 'auto', 'static' or 'python'"),
        (DaytonaConfig, {"cpu": 2}, "only to sandboxes built from an image"),
        (E2BConfig, {"sandbox_timeout_s": 86_401}, "less than or equal to 86400"),
        (SandboxFusionConfig, {"retries": -1}, "greater than or equal to 0"),
    ],
)
def test_what_a_constructor_checked_by_hand_the_model_checks(
    model: type[BaseBackendConfig], options: dict[str, Any], complaint: str
) -> None:
    """These checks need no SDK and no machine: a config refuses the value before any backend exists."""
    with pytest.raises(InvalidRequest, match=complaint) as info:
        model.from_options(None, options)
    message = info.value.message
    assert (
        message.startswith(f"backend {model.backend_name()!r} rejected its options: ")
        and next(iter(options)) in message
    )


class _CountingConfig(BaseBackendConfig):
    kind: str = "counted"
    size: int = 1
    validations: ClassVar[int] = 0

    @model_validator(mode="after")
    def _count(self) -> _CountingConfig:
        type(self).validations += 1
        return self


class _CountedBackend:
    """A backend class that names its model: the registry hands it the config it built."""

    config_model = _CountingConfig

    def __init__(self, config: _CountingConfig | None = None, **options: Any) -> None:
        self.config = _CountingConfig.from_options(config, options)


def test_the_registry_builds_a_backends_config_once() -> None:
    sandboxkit.registry.register(BackendSpec(name="counted", factory=_CountedBackend, config=_CountingConfig))  # type: ignore[arg-type]
    _CountingConfig.validations = 0
    built = sandboxkit.backend("counted", size=3)
    assert isinstance(built, _CountedBackend) and built.config.size == 3
    assert _CountingConfig.validations == 1


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
