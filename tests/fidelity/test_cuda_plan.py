"""cuda requests: Sandbox Fusion's project format is planned, and no GPU means a refusal before anything runs.

Sandbox Fusion (``sandbox/runners/cuda.py``) writes the request's files as a CMake project and runs
``mkdir build && cd build && cmake .. && make -j 4``, then ``./build/main``; it never writes ``code`` anywhere.
sandboxkit plans the same commands when the files carry a ``CMakeLists.txt`` and keeps ``nvcc`` on ``main.cu``
otherwise. This machine has no GPU: the planned commands are checked here, and the refusal is checked on a
real sandbox; a build that runs needs a GPU host.
"""

from __future__ import annotations

import pytest

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.errors import ToolchainMissing
from sandboxkit.languages import LANGUAGES, NVIDIA_DEVICE, file_present
from sandboxkit.models import Limits, RunRequest

CUDA = LANGUAGES["cuda"]


def test_a_request_with_a_cmake_project_is_built_as_sandbox_fusion_builds_it() -> None:
    files = ["CMakeLists.txt", "main.cu", "kernel.cuh", "utils.h"]
    compile_argv, run_argv = CUDA.project_argvs("", files, ["x"])
    assert compile_argv == ["bash", "-c", "mkdir build && cd build && cmake .. && make -j 4"]
    assert run_argv == ["./build/main", "x"]


def test_a_request_without_cmake_compiles_main_cu_with_nvcc() -> None:
    assert CUDA.project_argvs("__global__ void k() {}", ["data.txt"], []) == (
        ["nvcc", "-o", "main", "main.cu"],
        ["./main"],
    )
    assert CUDA.project_argvs("", ["sub/CMakeLists.txt"], [])[0] == ["nvcc", "-o", "main", "main.cu"]  # top level only


def test_other_languages_plan_their_usual_commands() -> None:
    assert LANGUAGES["c"].project_argvs("int main(){}", ["CMakeLists.txt"], []) == (
        LANGUAGES["c"].compile_argv("int main(){}"),
        ["./main"],
    )


async def test_cuda_is_refused_before_anything_runs_without_a_gpu() -> None:
    if file_present(NVIDIA_DEVICE):
        pytest.skip("this machine has a GPU driver: cuda is not refused here")
    backend = SubprocessBackend()
    sandbox = await backend.open(Limits(timeout_s=10.0))
    try:
        files = {"CMakeLists.txt": "project(main)\nadd_executable(main main.cu)\n", "main.cu": "int main() {}\n"}
        with pytest.raises(ToolchainMissing) as caught:
            await sandbox.run(RunRequest(code="", language="cuda", files=files, fetch_files=["build"]))
        assert "nvidia-smi" in str(caught.value) or NVIDIA_DEVICE in str(caught.value)
        assert await sandbox.read_files(["CMakeLists.txt"]) == {}  # refused before the files were written
    finally:
        await sandbox.close()
        await backend.aclose()
