"""``plan``: compile-then-run worked out once, in the language layer, for every command backend."""

from __future__ import annotations

from sandboxkit._plan import plan, warm_python_ok
from sandboxkit.languages import resolve_language
from sandboxkit.models import Limits, RunRequest


def test_an_interpreted_language_is_one_run_step() -> None:
    request = RunRequest(code="print(1)", language="python", argv=["a"], limits=Limits(timeout_s=3))
    planned = plan(request, warm_python=False)
    assert planned.compile is None
    assert planned.run.argv == resolve_language("python").run_argv("print(1)", ["a"])
    assert planned.run.timeout_s == 3 and planned.run.python_script is None
    assert planned.source_name == "main.py" and planned.source == "print(1)"


def test_a_compiled_language_compiles_under_the_compile_timeout_first() -> None:
    code = "int main(){return 0;}"
    request = RunRequest(code=code, language="cpp", limits=Limits(timeout_s=2, compile_timeout_s=20))
    planned = plan(request, warm_python=True)
    cpp = resolve_language("cpp")
    assert planned.compile is not None
    assert planned.compile.argv == cpp.compile_argv(code) and planned.compile.timeout_s == 20
    assert planned.run.argv == cpp.run_argv(code, []) and planned.run.timeout_s == 2
    assert planned.steps == (planned.compile, planned.run)
    assert planned.run.python_script is None  # the fast path is Python's alone


def test_python_takes_the_warm_path_unless_the_interpreter_is_configured_by_environment() -> None:
    fast = plan(RunRequest(code="x", argv=["1"]), warm_python=True).run
    assert fast.python_script == "main.py" and fast.python_args == ("1",)
    assert plan(RunRequest(code="x"), warm_python=False).run.python_script is None
    # PYTHONHASHSEED & co. are read at interpreter start: a warm interpreter would ignore them.
    assert plan(RunRequest(code="x", env={"PYTHONHASHSEED": "0"}), warm_python=True).run.python_script is None
    assert not warm_python_ok(resolve_language("python"), {"PYTHONPATH": "x"})
    assert warm_python_ok(resolve_language("python"), {"OTHER": "x"})
    assert not warm_python_ok(resolve_language("bash"), {})


def test_a_cuda_request_whose_files_hold_a_cmake_project_builds_it_as_sandbox_fusion_does() -> None:
    # Sandbox Fusion's cuda runner builds the request's files (cmake .. && make in build/), runs ./build/main and
    # writes ``code`` nowhere: a main.cu among the files must survive the run's own source write.
    files = {"CMakeLists.txt": b"project(p CUDA)\nadd_executable(main main.cu)\n", "main.cu": b"int main(){}\n"}
    request = RunRequest(code="ignored", language="cuda", files=files, argv=["x"])
    planned = plan(request, warm_python=True)
    assert planned.compile is not None and planned.compile.argv[-1].endswith("cmake .. && make -j 4")
    assert planned.run.argv == ["./build/main", "x"]
    assert (planned.source_name, planned.source) == ("main.cu", "int main(){}\n")
    # without a CMakeLists.txt: nvcc on main.cu, the code written there
    plain = plan(RunRequest(code="int main(){}", language="cuda"), warm_python=False)
    assert plain.compile is not None and plain.compile.argv == resolve_language("cuda").compile_argv("int main(){}")
    assert (plain.source_name, plain.source) == ("main.cu", "int main(){}")
