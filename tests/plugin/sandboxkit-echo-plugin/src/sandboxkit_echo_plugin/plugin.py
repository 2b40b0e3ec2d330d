"""Entry-point plugin module: advertises the backend lazily, as the hookspec asks."""

from sandboxkit import BackendSpec, hookimpl


@hookimpl
def sandboxkit_backends():
    return [BackendSpec(name="echo", factory="sandboxkit_echo_plugin.backend:EchoBackend", summary="echoes code")]
